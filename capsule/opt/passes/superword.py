"""Superword merging: runs of narrow stores of immediates become the fewest wide stores.

A run is a sequence of back-to-back ``BPF_ST`` instructions in one block through the same base register
(``*(u8 *)(r10 - 4) = 0; *(u8 *)(r10 - 3) = 0; ...``; clang emits them to zero or fill structures). Their
bytes are laid out by address; from the lowest, every 2-, 4- or 8-byte window that the run fills completely
and the verifier accepts there (the stack wants it aligned to its size) becomes one store of the
little-endian combination (widest first), placed at the first store of the run, and the stores it covers
go. A byte written twice in a run keeps the later value (a store entirely overwritten later in its run goes).
An 8-byte ``BPF_ST`` sign-extends its 32-bit immediate, so the combined constant must be such a value. Where
the wide store may go follows the verifier rules of the alignment pass (stack aligned, packet/map
value/arena anywhere, never the context). Loads are merged by the alignment pass, which sees how their values
are combined.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import BYTES_SIZE, Class, Mode, Size
from capsule.ints import MASK8, MASK32, fits_signed, signed, unsigned

from ..analysis import Analysis
from ..effects import mem_size
from ..values import access_val
from .align import wide_access_ok
from .base import Edits, Pass

_ST = frozenset(Class.ST | Mode.MEM | s for s in Size)


class Superword(Pass):
    name = "superword"
    summary = "merge runs of adjacent narrow stores of constants into the fewest wide stores"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        n = len(insns)
        i = 0
        while i < n:
            if insns[i].code not in _ST:
                i += 1
                continue
            j = i + 1
            starts = a.block_starts
            while j < n and insns[j].code in _ST and insns[j].dst == insns[i].dst and j not in starts:
                j += 1
            if j - i >= 2 and a.values.reachable(i):
                self._run(a, e, list(range(i, j)))
            i = j

    def _run(self, a: Analysis, e: Edits, run: list[int]) -> None:
        insns = a.code.insns
        first = insns[run[0]]
        data: dict[int, tuple[int, int]] = {}  # offset -> (byte value, store index)
        for k in run:
            s = insns[k]
            size = mem_size(s)
            v = s.imm & MASK32 if size <= 4 else unsigned(signed(s.imm, 32))
            for b in range(size):
                data[s.off + b] = ((v >> (8 * b)) & MASK8, k)
        covered: set[int] = set()
        new: list[tuple[int, int, int]] = []  # (offset, size, value)
        for off in sorted(data):
            if off in covered:
                continue
            # the store that last wrote this byte starts before it: every window from here would cut that store
            # (windows are checked from the lowest byte up, so no byte after an uncovered one is covered yet)
            if insns[data[off][1]].off < off:
                continue
            for size in (8, 4, 2):
                span = range(off, off + size)
                if any(b not in data for b in span):
                    continue
                # every store touching these bytes must lie entirely inside the window, and there must be two
                touching = {data[b][1] for b in span}
                if len(touching) < 2 or any(
                        not (off <= insns[k].off and insns[k].off + mem_size(insns[k]) <= off + size)
                        for k in touching):
                    continue
                value = sum(data[b][0] << (8 * (b - off)) for b in span)
                if size == 8 and not fits_signed(signed(value), 32):
                    continue
                if not wide_access_ok(access_val(a.values, run[0], first.dst, off), size, a.prog_type):
                    continue
                new.append((off, size, value))
                covered.update(span)
                break
        if not new:
            return
        gone = {data[b][1] for b in covered}
        # stores whose every byte a later store of the run overwrites are dead: they go too
        gone |= {k for k in run if all(data[insns[k].off + b][1] != k for b in range(mem_size(insns[k])))}
        # stores left alone must not be overwritten by a merged store placed before them: every store of
        # the run either goes or touches no merged byte
        keep = [k for k in run if k not in gone]
        if any(insns[k].off + b in covered for k in keep for b in range(mem_size(insns[k]))):
            return
        if not e.free(*run):
            return
        slots = sorted(gone)
        for k, (off, size, value) in zip(slots, new, strict=False):
            e.replace[k] = Insn(Class.ST | BYTES_SIZE[size] | Mode.MEM, first.dst, 0, off, signed(value, 32),
                                sym=insns[k].sym)
        e.delete.update(slots[len(new):])
        e.rewrites += len(new)
