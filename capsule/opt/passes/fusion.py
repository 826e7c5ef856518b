"""Macro-op fusion: load, op, store back to the same address becomes one atomic read-modify-write.

``rA = *(uN *)(rB + off); rA op= rC; *(uN *)(rB + off) = rA`` with ``op`` one of add/or/and/xor, N 4 or 8,
becomes ``lock *(uN *)(rB + off) op= rC`` when ``rA``'s loaded and computed values are used by nothing else and
``rA`` is dead afterwards; with an immediate operand ``rA = K`` stays in front (3 instructions to 2). The
three instructions are found by scanning the block for the next instructions that touch ``rA`` (no def-use
chains needed), within a short window.

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
from capsule.bpf.opcodes import BYTES_SIZE, OP_MASK, Alu, Class, Mode, Size, Src

from ..analysis import Analysis
from ..effects import mem_size
from ..values import Kind, Val, access_val
from .base import Edits, Pass

_OPS = (Alu.ADD, Alu.OR, Alu.AND, Alu.XOR)  # the Atomic enum uses the same numbers
_LOADS = frozenset((Class.LDX | Mode.MEM | Size.W, Class.LDX | Mode.MEM | Size.DW))  # 4 and 8 bytes


class Fusion(Pass):
    name = "fusion"
    summary = "load/op/store to one address into an atomic op (add, or, and, xor)"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        total = len(insns)
        starts = a.block_starts
        for i, ld in enumerate(insns):
            if ld.code not in _LOADS or ld.dst == ld.src:
                continue
            n = mem_size(ld)
            ra = 1 << ld.dst
            # the next instruction touching rA must be the op, the one after it the store; all in one block
            j = self._next_touching(a, i, ra, total, starts)
            if j is None:
                continue
            op = insns[j]
            if op.dst != ld.dst or op.off or op.cls not in (Class.ALU, Class.ALU64) or (op.code & OP_MASK) not in _OPS:
                continue
            if n == 8 and op.cls != Class.ALU64:
                continue
            xform = bool(op.code & Src.X)
            if xform and op.src in (ld.dst, ld.src):
                continue
            k = self._next_touching(a, j, ra, total, starts)
            if k is None:
                continue
            st = insns[k]
            if st.code != (Class.STX | BYTES_SIZE[n] | Mode.MEM) or st.src != ld.dst or st.dst != ld.src or \
                    st.off != ld.off:
                continue
            if not a.values.reachable(i) or not a.live.dead_after(k, ld.dst):
                continue
            effs = a.effects
            base = 1 << ld.src
            rc = 1 << op.src if xform else 0
            if any(effs[m].defs & base or (m > j and effs[m].defs & rc) or
                   (m != j and (effs[m].load or effs[m].store)) for m in range(i + 1, k)):
                continue
            p = access_val(a.values, i, ld.src, ld.off)
            off = p.const_offset
            if p.kind not in (Kind.STACK, Kind.MAP_VALUE) or off is None or off % n:
                continue
            if not self._scalar_slot(a, i, ld.dst, p, n):
                continue
            if not e.free(i, j, k):
                continue
            atomic = Insn(Class.STX | BYTES_SIZE[n] | Mode.ATOMIC, st.dst, op.src if xform else ld.dst, st.off,
                          op.code & OP_MASK, sym=st.sym)
            if xform:
                e.delete.update((i, j))
            else:
                e.replace[i] = Insn(op.cls | Alu.MOV | Src.K, ld.dst, 0, 0, op.imm, sym=ld.sym)
                e.delete.add(j)
            e.replace[k] = atomic
            e.rewrites += 1

    @staticmethod
    def _scalar_slot(a: Analysis, i: int, reg: int, p: Val, n: int) -> bool:
        """Whether the location holds a plain number: an atomic on a stack slot holding a spilled pointer makes
        the verifier forget the pointer (the slot becomes data), and a map value's 8-byte field could be a
        kernel pointer only when loaded as such (kptrs are refused by atomics anyway)."""
        loaded = a.values.reg(i + 1, reg)
        if p.kind != Kind.STACK:
            return loaded.kind in (Kind.SCALAR, Kind.NONSTACK)
        if n == 8:
            return loaded.kind == Kind.SCALAR
        st = a.values.before[i]
        off = p.const_offset
        assert st is not None and off is not None
        slot = st.spills.get(off - off % 8)
        return slot is None or slot.kind == Kind.SCALAR

    @staticmethod
    def _next_touching(a: Analysis, i: int, mask: int, total: int, starts: set[int]) -> int | None:
        """The next instruction in ``i``'s block that reads or writes a register of ``mask``."""
        effs = a.effects
        for m in range(i + 1, min(i + 16, total)):
            if m in starts:
                return None
            if (effs[m].uses | effs[m].defs) & mask:
                return m
        return None
