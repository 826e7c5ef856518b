"""Constant propagation and dead-code elimination.

With the value analysis' constants:
- ``*(size *)(p + off) = rS`` with ``rS`` a known constant becomes a store of an immediate (for 8-byte stores
  only when the constant is a sign-extended 32-bit value), where the verifier allows ``BPF_ST`` (stack, map
  values, packet; never the context);
- an ALU instruction whose result is a known constant becomes ``mov`` of it (64-bit ``mov`` when it is a
  sign-extended 32-bit value, ``mov32`` when it fits 32 unsigned bits), and a register operand that is a known
  constant becomes an immediate;
- a conditional jump whose outcome is known becomes ``ja`` or disappears.
Then dead code goes: blocks no path reaches, instructions without side effects whose result is never read
(ALU, ``ld_imm64``, loads), and stores to stack bytes that are never read again.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Class, Jmp, Mode, Src

from ..analysis import Analysis
from ..effects import effect
from ..semantics import M32, M64, branch_taken, imm64, sext
from ..values import Kind, access_val
from .base import Edits, Pass

_ST_OK = (Kind.STACK, Kind.MAP_VALUE, Kind.PKT)


def _fits_s32(v: int) -> bool:
    s = sext(v, 64)
    return -(1 << 31) <= s < 1 << 31


def mov_const(dst: int, v: int, sym: str | None = None) -> Insn | None:
    """One instruction that puts the 64-bit value ``v`` in ``dst``, if one exists."""
    v &= M64
    if _fits_s32(v):
        return Insn(Class.ALU64 | Alu.MOV | Src.K, dst, 0, 0, sext(v, 64), sym=sym)
    if v <= M32:
        return Insn(Class.ALU | Alu.MOV | Src.K, dst, 0, 0, sext(v, 32), sym=sym)
    return None


class ConstProp(Pass):
    name = "constprop"
    summary = "constant propagation, store-immediate, known branches, dead code and dead stack stores"

    def find(self, a: Analysis, e: Edits) -> None:
        self._fold(a, e)
        if not e:
            self._dce(a, e)

    def _fold(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        vals = a.values
        for i, ins in enumerate(insns):
            st = vals.before[i]
            if st is None or not e.free(i):
                continue
            cls = ins.cls
            if cls == Class.STX and (ins.code & 0xE0) == Mode.MEM:
                v = st.regs[ins.src]
                base = access_val(vals, i, ins.dst, ins.off)
                if v.is_const and base.kind in _ST_OK:
                    size = ins.code & 0x18
                    val = v.tn.value
                    if size == 0x18 and not _fits_s32(val):
                        continue
                    e.replace[i] = Insn(Class.ST | size | Mode.MEM, ins.dst, 0, ins.off, sext(val, 32), sym=ins.sym)
                    e.rewrites += 1
            elif cls in (Class.ALU, Class.ALU64):
                after = vals.before[i + 1] if i + 1 < len(insns) else None
                if after is None:
                    continue
                r = after.regs[ins.dst]
                is_mov_k = (ins.code & 0xF0) == Alu.MOV and not ins.code & Src.X
                if r.is_const and not is_mov_k:
                    new = mov_const(ins.dst, r.tn.value, ins.sym)
                    if new is not None:
                        e.replace[i] = new
                        e.rewrites += 1
                        continue
                if ins.code & Src.X and ins.off == 0 and (ins.code & 0xF0) not in (Alu.END,):
                    s = st.regs[ins.src]
                    if s.is_const:
                        k = s.tn.value
                        if cls == Class.ALU or _fits_s32(k):
                            e.replace[i] = Insn(ins.code & ~Src.X, ins.dst, 0, 0, sext(k, 32), sym=ins.sym)
                            e.rewrites += 1
            elif ins.is_jump and (ins.code & 0xF0) not in (Jmp.JA, Jmp.JCOND):
                d = st.regs[ins.dst]
                s = st.regs[ins.src] if ins.code & Src.X else None
                if s is not None and s.is_const and not d.is_const and ins.src != ins.dst:
                    k = s.tn.value
                    if ins.cls == Class.JMP32 or _fits_s32(k):
                        e.replace[i] = Insn(ins.code & ~Src.X, ins.dst, 0, ins.off, sext(k, 32), sym=ins.sym)
                        e.rewrites += 1
                    continue
                if not d.is_const or (s is not None and not s.is_const):
                    continue
                taken = branch_taken(ins, d.tn.value, s.tn.value if s is not None else 0)
                if taken is None:
                    continue
                if taken:
                    e.replace[i] = Insn(Class.JMP | Jmp.JA, sym=ins.sym)
                else:
                    e.delete.add(i)
                e.rewrites += 1

    def _dce(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        vals = a.values
        live = a.live
        for fn in a.cfg.functions.values():
            reach = fn.reachable()
            for bs, b in fn.blocks.items():
                if bs not in reach:
                    e.delete.update(b.indices())
                    e.rewrites += 1
        for i, ins in enumerate(insns):
            if i in e.delete or not vals.reachable(i):
                continue
            cls = ins.cls
            pure = cls in (Class.ALU, Class.ALU64) or ins.is_ld_imm64 or (
                cls == Class.LDX and (ins.code & 0xE0) in (Mode.MEM, Mode.MEMSX)
            )
            if pure:
                d = effect(ins).defs
                if ins.dst != 10 and not (live.live_out[i] & d):
                    e.delete.add(i)
                    e.rewrites += 1
            elif ins.is_jump and a.code.targets.get(i) == i + 1 and (ins.code & 0xF0) != Jmp.JCOND:
                e.delete.add(i)  # typically left behind by removing what it jumped over
                e.rewrites += 1
            elif cls in (Class.ST, Class.STX) and (ins.code & 0xE0) == Mode.MEM and ins.dst == 10:
                if a.stack.store_dead(a.cfg, i):
                    e.delete.add(i)
                    e.rewrites += 1


__all__ = ["ConstProp", "mov_const", "imm64"]
