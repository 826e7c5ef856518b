"""Constant propagation and dead-code elimination.

With the value analysis' constants:
- ``*(size *)(p + off) = rS`` with ``rS`` a known constant becomes a store of an immediate (for 8-byte stores
  only when the constant is a sign-extended 32-bit value), where the verifier allows ``BPF_ST`` (stack, map
  values, packet, arena; never the context);
- an ALU instruction whose result is a known constant becomes ``mov`` of it (64-bit ``mov`` when it is a
  sign-extended 32-bit value, ``mov32`` when it fits 32 unsigned bits), and a register operand that is a known
  constant becomes an immediate; a ``mov`` of the constant the register already holds goes;
- a conditional jump whose outcome is known becomes ``ja`` or disappears.
Dead code goes in the same round (first): blocks no path reaches, instructions without side effects whose
result is never usefully read (ALU, ``ld_imm64``, loads; whole dead chains at once, ``liveness.faint``), and
stores to stack bytes that are never read again (placed by the value analysis, so frames whose address is
taken are covered too). Folding only ever removes reads and edges, so the liveness and reachability of the
unfolded code stay conservative for the folded one, and both kinds of edit can be applied together.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CLASS_MASK, MODE_MASK, OP_MASK, SIZE_MASK, Alu, Class, Jmp, Mode, Size, Src
from capsule.ints import MASK32, MASK64, fits_signed, signed

from ..analysis import Analysis
from ..effects import COND_JUMPS, JUMPS
from ..semantics import branch_taken, imm64
from ..values import Kind, access_val
from .base import Edits, Pass

_ST_OK = (Kind.STACK, Kind.MAP_VALUE, Kind.PKT, Kind.ARENA)
_MOV_K = (Class.ALU64 | Alu.MOV | Src.K, Class.ALU | Alu.MOV | Src.K)
# plain ints and a plain member for the scan over every instruction (no enum lookups or properties per step)
_ST, _STX, _ALU, _ALU64 = int(Class.ST), int(Class.STX), int(Class.ALU), int(Class.ALU64)
_MEM, _X, _END, _DW = int(Mode.MEM), int(Src.X), int(Alu.END), int(Size.DW)
_SCALAR = Kind.SCALAR


def _fits_s32(v: int) -> bool:
    """Whether the 64-bit pattern ``v`` is a sign-extended 32-bit immediate."""
    return fits_signed(signed(v), 32)


def mov_const(dst: int, v: int, sym: str | None = None) -> Insn | None:
    """One instruction that puts the 64-bit value ``v`` in ``dst``, if one exists."""
    v &= MASK64
    if _fits_s32(v):
        return Insn(Class.ALU64 | Alu.MOV | Src.K, dst, 0, 0, signed(v, 64), sym=sym)
    if v <= MASK32:
        return Insn(Class.ALU | Alu.MOV | Src.K, dst, 0, 0, signed(v, 32), sym=sym)
    return None


class ConstProp(Pass):
    name = "constprop"
    summary = "constant propagation, store-immediate, known branches, dead code and dead stack stores"

    def find(self, a: Analysis, e: Edits) -> None:
        self._dce(a, e)
        # dropping ``rX = K`` because rX already holds K relies on the earlier definition, which dead-code
        # removal may be deleting in this round (it is dead *because* of this mov): only when it removed nothing
        self._fold(a, e, drop_redundant=not e)

    def _fold(self, a: Analysis, e: Edits, drop_redundant: bool = True) -> None:
        insns = a.code.insns
        before = a.values.before
        n = len(insns)
        for i, ins in enumerate(insns):
            st = before[i]
            if st is None:
                continue
            c = ins.code
            cls = c & CLASS_MASK
            if cls == _STX and (c & MODE_MASK) == _MEM:
                v = st[0][ins.src]
                if v[0] is not _SCALAR or v[1][1]:  # not a constant
                    continue
                base = access_val(a.values, i, ins.dst, ins.off)
                if base.kind in _ST_OK and e.free(i):
                    size = c & SIZE_MASK
                    val = v.tn.value
                    if size == _DW and not _fits_s32(val):
                        continue
                    e.replace[i] = Insn(Class.ST | size | Mode.MEM, ins.dst, 0, ins.off, signed(val, 32), sym=ins.sym)
                    e.rewrites += 1
            elif cls == _ALU or cls == _ALU64:
                if c in _MOV_K and not ins.off:
                    if not drop_redundant:
                        continue
                    old = st[0][ins.dst]
                    want = (ins.imm & MASK32) if cls == _ALU else imm64(ins.imm)
                    if old.is_const and old.tn.value == want and e.free(i):
                        e.delete.add(i)  # the register already holds it
                        e.rewrites += 1
                    continue
                after = before[i + 1] if i + 1 < n else None
                if after is None:
                    continue
                r = after[0][ins.dst]
                if r[0] is _SCALAR and not r[1][1]:
                    new = mov_const(ins.dst, r.tn.value, ins.sym)
                    if new is not None and e.free(i):
                        e.replace[i] = new
                        e.rewrites += 1
                        continue
                if c & _X and ins.off == 0 and (c & OP_MASK) != _END:
                    s = st[0][ins.src]
                    if s[0] is _SCALAR and not s[1][1]:
                        k = s.tn.value
                        if (cls == _ALU or _fits_s32(k)) and e.free(i):
                            e.replace[i] = Insn(c & ~Src.X, ins.dst, 0, 0, signed(k, 32), sym=ins.sym)
                            e.rewrites += 1
            elif c in COND_JUMPS:
                d = st.regs[ins.dst]
                sv = st.regs[ins.src] if c & Src.X else None
                if sv is not None and sv.is_const and not d.is_const and ins.src != ins.dst:
                    k = sv.tn.value
                    if (cls == Class.JMP32 or _fits_s32(k)) and e.free(i):
                        e.replace[i] = Insn(c & ~Src.X, ins.dst, 0, ins.off, signed(k, 32), sym=ins.sym)
                        e.rewrites += 1
                    continue
                if not d.is_const or (sv is not None and not sv.is_const):
                    continue
                taken = branch_taken(ins, d.tn.value, sv.tn.value if sv is not None else 0)
                if taken is None or not e.free(i):
                    continue
                if taken:
                    e.replace[i] = Insn(Class.JMP | Jmp.JA, sym=ins.sym)
                else:
                    e.delete.add(i)
                e.rewrites += 1

    def _dce(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        before = a.values.before
        targets = a.code.targets
        for fn in a.cfg.functions.values():
            reach = fn.reachable()
            for bs, b in fn.blocks.items():
                if bs not in reach and e.free(*b.indices()):
                    e.delete.update(b.indices())
                    e.rewrites += 1
        for i in sorted(a.faint):
            if before[i] is not None and e.free(i):
                e.delete.add(i)
                e.rewrites += 1
        stack = None
        for i, ins in enumerate(insns):
            if before[i] is None:
                continue
            c = ins.code
            cls = c & CLASS_MASK
            if c in JUMPS:
                if targets.get(i) == i + 1 and (c & OP_MASK) != Jmp.JCOND and e.free(i):
                    e.delete.add(i)  # typically left behind by removing what it jumped over
                    e.rewrites += 1
            elif (cls == _ST or cls == _STX) and (c & MODE_MASK) == _MEM:
                if stack is None:
                    stack = a.stack
                if stack.store_dead(a.cfg, i) and e.free(i):
                    e.delete.add(i)
                    e.rewrites += 1


__all__ = ["ConstProp", "mov_const", "imm64"]
