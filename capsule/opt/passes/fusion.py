"""Macro-op fusion: load, op, store back to the same address becomes one atomic read-modify-write.

``rA = *(uN *)(rB + off); rA op= rC; *(uN *)(rB + off) = rA`` with ``op`` one of add/or/and/xor, N 4 or 8,
becomes ``lock *(uN *)(rB + off) op= rC`` when ``rA``'s loaded and computed values are used by nothing else and
``rA`` is dead afterwards; with an immediate operand ``rA = K`` stays in front (3 instructions to 2).

Assumptions, stated: the atomic computes the same memory result as the plain sequence for a program that is
the only writer of that location during the sequence (a BPF program runs to completion on its CPU; the only
difference concurrency can make is that the atomic version no longer loses concurrent updates). A ``lock``
instruction costs more cycles on x86 than load+add+store, so this pass trades speed for size; it is only
applied where the verifier allows atomics: stack and map values, aligned to N (BPF_ATOMIC on the context or
the packet is refused, and atomics are always alignment-checked). For N = 8 the operation must be 64-bit;
for N = 4 either width gives the same low 32 bits.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import BYTES_SIZE, Alu, Class, Mode, Src

from ..analysis import Analysis
from ..effects import effect, mem_size
from ..values import Kind, access_val
from .base import Edits, Pass

_OPS = (Alu.ADD, Alu.OR, Alu.AND, Alu.XOR)  # the Atomic enum uses the same numbers


class Fusion(Pass):
    name = "fusion"
    summary = "load/op/store to one address into an atomic op (add, or, and, xor)"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        for i, ld in enumerate(insns):
            if ld.cls != Class.LDX or (ld.code & 0xE0) != Mode.MEM or not a.values.reachable(i):
                continue
            n = mem_size(ld)
            if n not in (4, 8) or ld.dst == ld.src:
                continue
            uses = a.du.uses_of.get(i, set())
            if len(uses) != 1:
                continue
            (j,) = uses
            op = insns[j]
            if j <= i or a.block_of[j] != a.block_of[i] or op.dst != ld.dst or op.off:
                continue
            if op.cls not in (Class.ALU, Class.ALU64) or (op.code & 0xF0) not in _OPS:
                continue
            if n == 8 and op.cls != Class.ALU64:
                continue
            xform = bool(op.code & Src.X)
            if xform and op.src in (ld.dst, ld.src):
                continue
            st_uses = a.du.uses_of.get(j, set())
            if len(st_uses) != 1:
                continue
            (k,) = st_uses
            st = insns[k]
            if k <= j or a.block_of[k] != a.block_of[i]:
                continue
            if st.code != (Class.STX | BYTES_SIZE[n] | Mode.MEM) or st.src != ld.dst:
                continue
            if st.dst != ld.src or st.off != ld.off or a.du.defs_at(k, st.dst) != a.du.defs_at(i, ld.src):
                continue
            if a.du.defs_at(k, ld.dst) != frozenset({j}) or not a.live.dead_after(k, ld.dst):
                continue
            if xform and a.du.defs_at(k, op.src) != a.du.defs_at(j, op.src):
                continue
            p = access_val(a.values, i, ld.src, ld.off)
            off = p.const_offset
            if p.kind not in (Kind.STACK, Kind.MAP_VALUE) or off is None or off % n:
                continue
            if any(effect(insns[m]).load or effect(insns[m]).store for m in range(i + 1, k) if m != j):
                continue
            if not e.free(i, j, k):
                continue
            atomic = Insn(Class.STX | BYTES_SIZE[n] | Mode.ATOMIC, st.dst, op.src if xform else ld.dst, st.off,
                          op.code & 0xF0, sym=st.sym)
            if xform:
                e.delete.update((i, j))
            else:
                e.replace[i] = Insn(op.cls | Alu.MOV | Src.K, ld.dst, 0, 0, op.imm, sym=ld.sym)
                e.delete.add(j)
            e.replace[k] = atomic
            e.rewrites += 1
