"""Data alignment: put back together the loads and stores clang split into bytes.

Not knowing a pointer's alignment, LLVM's BPF backend reads a 16/32/64-bit field as byte loads joined by
shifts and ors (``r1 = *(u8 *)(r7 + 13); r1 <<= 8; r2 = *(u8 *)(r7 + 12); r1 |= r2``), and writes one as a
byte store per shifted copy of the value. Where the verifier accepts the wide access, one load or store does.

What the verifier accepts (kernel/bpf/verifier.c, ``check_ptr_alignment``; x86-64 has
``CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS``, so alignment is only strict when the program asks for it with
``BPF_F_STRICT_ALIGNMENT``):

- packet, packet meta, map value: any alignment (not strict on x86); the packet range the byte accesses
  proved covers the wide one because it covers every byte of it;
- arena: not alignment-checked at all (PROBE_MEM32 accesses);
- stack: always strict (spill tracking needs it): the wide access must be aligned to its size;
- context: each field has its own allowed sizes; only SYSCALL contexts (a plain buffer, ``off % size == 0``)
  are merged, aligned;
- anything the analysis cannot name is left alone.

A load composition is recognised by walking back from an ``|=`` through its single-use operands (block-local
def-use, ``capsule.opt.local``) (byte/half
loads, left shifts by whole bytes, register copies) inside one basic block; it must fill bytes ``0..N-1`` of
the result from ``base+off .. base+off+N-1`` in little-endian order, from one unmodified base, with no store
or call in between. A store group is a set of stores in one block of ``V >> 8k`` (through copies and right
shifts) to ``base+off+k``; it becomes one store of ``V`` at the position of the last of them, if nothing
between them reads memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import BYTES_SIZE, Alu, Class, Mode, Src

from ..analysis import Analysis
from ..effects import effect, mem_size
from ..values import Kind, Val, access_val
from .base import Edits, Pass

_ANY_ALIGN = (Kind.PKT, Kind.PKT_META, Kind.MAP_VALUE, Kind.ARENA)
_ORS = (Class.ALU64 | Alu.OR | Src.X, Class.ALU | Alu.OR | Src.X)
_NARROW_LOADS = frozenset(Class.LDX | Mode.MEM | s for s in (0x00, 0x08, 0x10))
_NARROW_STORES = frozenset(Class.STX | Mode.MEM | s for s in (0x00, 0x08, 0x10))
SYSCALL = 31


def wide_access_ok(base: Val, size: int, prog_type: int) -> bool:
    """Whether the verifier accepts a ``size``-byte access at pointer ``base`` (with the access offset)."""
    if base.kind in _ANY_ALIGN:
        return True
    if base.kind == Kind.STACK or (base.kind == Kind.CTX and prog_type == SYSCALL):
        off = base.const_offset
        return off is not None and off % size == 0
    return False


@dataclass
class _Comp:
    base: tuple[int, tuple]  # base register and the id of its value at the loads (``LocalDefs.value_id``)
    bytes: dict[int, int]  # byte position in the value -> memory offset from the base
    insns: set[int]
    first: int  # earliest instruction involved


class Align(Pass):
    name = "align"
    summary = "merge byte-wise loads/stores that clang split into one wide access where the verifier allows"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        if any(ins.code in _NARROW_LOADS for ins in insns):
            for i, ins in enumerate(insns):
                if ins.code in _ORS and a.values.reachable(i) and e.free(i):
                    self._load(a, e, i, ins)
        if sum(1 for ins in insns if ins.code in _NARROW_STORES) >= 2:
            self._stores(a, e)

    # -- loads ---------------------------------------------------------------------------------------------
    def _trace(self, a: Analysis, reg: int, at: int, w32: bool, depth: int = 0) -> _Comp | None:
        if depth > 24:
            return None
        loc = a.local
        d = loc.def_before(at, reg)
        if d is None or d < 0 or not loc.uses_within(d, reg, {at}):
            return None
        ins = a.code.insns[d]
        limit = 4 if w32 else 8
        c: _Comp | None
        if ins.cls == Class.LDX and (ins.code & 0xE0) == Mode.MEM:
            n = mem_size(ins)
            if n > limit:
                return None
            c = _Comp((ins.src, loc.value_id(d, ins.src)), {k: ins.off + k for k in range(n)}, {d}, d)
        elif ins.code in (Class.ALU64 | Alu.LSH | Src.K, Class.ALU | Alu.LSH | Src.K) and ins.imm % 8 == 0:
            c = self._trace(a, ins.dst, d, w32 or ins.cls == Class.ALU, depth + 1)
            if c is None:
                return None
            k = ins.imm // 8
            c.bytes = {p + k: o for p, o in c.bytes.items()}
            if c.bytes and max(c.bytes) >= (4 if ins.cls == Class.ALU else 8):
                return None
        elif ins.code in (Class.ALU64 | Alu.OR | Src.X, Class.ALU | Alu.OR | Src.X):
            w = w32 or ins.cls == Class.ALU
            c = self._trace(a, ins.dst, d, w, depth + 1)
            c2 = self._trace(a, ins.src, d, w, depth + 1) if c is not None else None
            c = _merge(c, c2)
        elif ins.code in (Class.ALU64 | Alu.MOV | Src.X, Class.ALU | Alu.MOV | Src.X) and ins.off == 0:
            c = self._trace(a, ins.src, d, w32 or ins.cls == Class.ALU, depth + 1)
        else:
            return None
        if c is None or (c.bytes and max(c.bytes) >= limit):
            return None
        c.insns.add(d)
        c.first = min(c.first, d)
        return c

    def _load(self, a: Analysis, e: Edits, i: int, ins: Insn) -> None:
        w32 = ins.cls == Class.ALU
        c = _merge(self._trace(a, ins.dst, i, w32), self._trace(a, ins.src, i, w32))
        if c is None:
            return
        n = len(c.bytes)
        if n not in (2, 4, 8) or set(c.bytes) != set(range(n)):
            return
        off = c.bytes[0]
        if any(c.bytes[k] != off + k for k in range(n)) or not -(1 << 15) <= off < 1 << 15:
            return
        base_reg, base_id = c.base
        if a.local.value_id(i, base_reg) != base_id:
            return
        if not wide_access_ok(access_val(a.values, i, base_reg, off), n, a.prog_type):
            return
        stack = access_val(a.values, i, base_reg, off).kind == Kind.STACK
        for j in range(c.first, i):
            if j not in c.insns and _writes_memory(a, j, stack):
                return
        if not e.free(i, *c.insns):
            return
        e.replace[i] = Insn(Class.LDX | BYTES_SIZE[n] | Mode.MEM, ins.dst, base_reg, off, sym=ins.sym)
        e.delete.update(c.insns)
        e.rewrites += 1

    # -- stores --------------------------------------------------------------------------------------------
    def _source(self, a: Analysis, reg: int, at: int, chain: set[int]) -> tuple[int, tuple, int] | None:
        """(register, its value id, right shift) such that ``reg`` at ``at`` holds ``that >> shift``."""
        shift = 0
        for _ in range(16):
            d = a.local.def_before(at, reg)
            if d is None or d < 0:
                break
            ins = a.code.insns[d]
            if ins.code == Class.ALU64 | Alu.RSH | Src.K and ins.imm % 8 == 0:
                shift += ins.imm
                chain.add(d)
                at = d
            elif ins.code == Class.ALU64 | Alu.MOV | Src.X and ins.off == 0:
                chain.add(d)
                reg, at = ins.src, d
            else:
                break
        return reg, a.local.value_id(at, reg), shift

    def _stores(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        groups: dict[tuple, list[tuple[int, int, int, set[int]]]] = {}
        for j, ins in enumerate(insns):
            if ins.code not in _NARROW_STORES or not a.values.reachable(j):
                continue
            size = mem_size(ins)
            if size > 4:
                continue
            chain: set[int] = set()
            src = self._source(a, ins.src, j, chain)
            if src is None:
                continue
            key = (a.block_of[j], ins.dst, a.local.value_id(j, ins.dst), src[0], src[1])
            groups.setdefault(key, []).append((j, ins.off - src[2] // 8, src[2], chain))
        for (_, base_reg, _, vreg, vid), members in groups.items():
            if len(members) < 2:
                continue
            offs = {off for _, off, _, _ in members}
            if len(offs) != 1:
                continue
            (off,) = offs
            covered: set[int] = set()
            for j, _, shift, _ in members:
                n = mem_size(insns[j])
                span = set(range(shift // 8, shift // 8 + n))
                if covered & span:
                    break
                covered |= span
            else:
                self._store_group(a, e, base_reg, vreg, vid, off, covered, members)

    def _store_group(self, a: Analysis, e: Edits, base_reg: int, vreg: int, vid: tuple, off: int,
                     covered: set[int], members: list) -> None:
        n = len(covered)
        if n not in (2, 4, 8) or covered != set(range(n)) or not -(1 << 15) <= off < 1 << 15:
            return
        idx = sorted(j for j, _, _, _ in members)
        first, last = idx[0], idx[-1]
        if a.local.value_id(last, vreg) != vid:
            return
        if not wide_access_ok(access_val(a.values, last, base_reg, off), n, a.prog_type):
            return
        chain: set[int] = set().union(*(c for _, _, _, c in members))
        for j in range(first, last):
            if j in idx:
                continue
            eff = effect(a.code.insns[j])
            if eff.load or eff.store or eff.call:
                return
        # the shifted copies may go only if nothing else reads them
        allowed = chain | set(idx)
        dead_chain = {d for d in chain if a.local.uses_within(d, a.code.insns[d].dst, allowed)}
        if not e.free(*idx, *dead_chain):
            return
        ins = a.code.insns[last]
        e.replace[last] = Insn(Class.STX | BYTES_SIZE[n] | Mode.MEM, base_reg, vreg, off, sym=ins.sym)
        e.delete.update(j for j in idx if j != last)
        e.delete.update(dead_chain)
        e.rewrites += 1


def _merge(c1: _Comp | None, c2: _Comp | None) -> _Comp | None:
    if c1 is None or c2 is None or c1.base != c2.base or set(c1.bytes) & set(c2.bytes):
        return None
    return _Comp(c1.base, {**c1.bytes, **c2.bytes}, c1.insns | c2.insns, min(c1.first, c2.first))


def _writes_memory(a: Analysis, j: int, base_is_stack: bool) -> bool:
    eff = effect(a.code.insns[j])
    if eff.call:
        return True
    if not eff.store:
        return False
    ins = a.code.insns[j]
    return base_is_stack or access_val(a.values, j, ins.dst, ins.off).kind != Kind.STACK
