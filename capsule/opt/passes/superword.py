"""Superword merging: adjacent narrow stores of immediates become one wider store.

Two stores of constants, back to back in one block, through the same base register, to neighbouring
addresses (``*(u8 *)(r10 - 4) = 0; *(u8 *)(r10 - 3) = 0``) become one store of twice the size with both
values (little endian). Repeating the pass builds 4- and 8-byte stores. An 8-byte ``BPF_ST`` sign-extends its
32-bit immediate, so the merged constant must be such a value. Where the wide store may go follows the same
verifier rules as the alignment pass (stack aligned, packet/map value/arena anywhere, never the context).
Loads are merged by the alignment pass, which sees how their values are combined.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import BYTES_SIZE, Class, Mode

from ..analysis import Analysis
from ..effects import mem_size
from ..semantics import sext
from ..values import access_val
from .align import wide_access_ok
from .base import Edits, Pass


def _st(ins: Insn) -> bool:
    return ins.cls == Class.ST and (ins.code & 0xE0) == Mode.MEM


class Superword(Pass):
    name = "superword"
    summary = "merge adjacent narrow stores of constants into one wider store"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        for i in range(len(insns) - 1):
            x, y = insns[i], insns[i + 1]
            if not (_st(x) and _st(y)) or x.dst != y.dst or (i + 1) in a.block_starts:
                continue
            if not a.values.reachable(i) or not e.free(i, i + 1):
                continue
            n = mem_size(x)
            if mem_size(y) != n or n == 8:
                continue
            if y.off == x.off + n:
                lo, hi = x, y
            elif x.off == y.off + n:
                lo, hi = y, x
            else:
                continue
            mask = (1 << (8 * n)) - 1
            value = (lo.imm & mask) | (hi.imm & mask) << (8 * n)
            if n * 2 == 8 and not -(1 << 31) <= sext(value, 64) < 1 << 31:
                continue
            if not wide_access_ok(access_val(a.values, i, lo.dst, lo.off), 2 * n, a.prog_type):
                continue
            e.replace[i] = Insn(Class.ST | BYTES_SIZE[2 * n] | Mode.MEM, lo.dst, 0, lo.off, sext(value, 32),
                                sym=x.sym)
            e.delete.add(i + 1)
            e.rewrites += 1
