"""Peephole: instructions that do nothing, and short sequences with a one-instruction equivalent.

Removed outright:

- ``rX = rX`` (64-bit move to itself), and ``wX = wX`` when the upper half is already known to be zero;
- jumps (conditional or not) to the very next instruction; a jump to a ``goto`` is sent where the ``goto``
  goes (threading; the ``goto`` often becomes unreachable and dead-code removal takes it);
- identities: ``+= 0``, ``-= 0``, ``|= 0``, ``^= 0``, shifts by 0, ``*= 1``, ``&= -1`` (32-bit forms only when
  the upper half is known zero, since they clear it), and ``&= K`` when known bits show the mask removes
  nothing;
- ``neg rX; neg rX`` (double negation) back to back;
- ``rX = rY; rY = rX``: the second move is redundant.

Rewritten, when the register the sequence computes is dead after the jump that reads it (liveness):

- ``rX &= K; if rX != 0 goto L`` becomes ``if rX & K goto L`` (``jset``), and ``rX = rY; rX &= K; if rX != 0
  goto L`` becomes ``if rY & K goto L``; the jump is 32-bit when either instruction was;
- ``wX = wY; if rX op K goto L`` (a zero extension compared in 64 bits) becomes the 32-bit ``if wY op K``,
  for ``K`` in ``[0, 2**31)``, signed comparisons turned into the unsigned ones they equal on that range;
- ``rX = K; if rX op rY goto L`` becomes ``if rY op' K goto L`` with the comparison mirrored.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CLASS_MASK, OP_MASK, Alu, Class, Jmp, Src
from capsule.ints import MASK32, MASK64, fits_unsigned

from ..analysis import Analysis
from ..effects import COND_JUMPS, JUMPS
from ..semantics import imm64
from ..values import Kind
from .base import Edits, Pass

_UPPER = MASK64 ^ MASK32
_MOV64_X = Class.ALU64 | Alu.MOV | Src.X
_MOV32_X = Class.ALU | Alu.MOV | Src.X
_NEG64 = Class.ALU64 | Alu.NEG
_JA = Class.JMP | Jmp.JA
_AND_K = (Class.ALU64 | Alu.AND | Src.K, Class.ALU | Alu.AND | Src.K)
_MOV_K = (Class.ALU64 | Alu.MOV | Src.K, Class.ALU | Alu.MOV | Src.K)
_JNE_K = (Class.JMP | Jmp.JNE | Src.K, Class.JMP32 | Jmp.JNE | Src.K)
_ALU_K = frozenset(c | op for c in (Class.ALU, Class.ALU64)
                   for op in (Alu.ADD, Alu.SUB, Alu.OR, Alu.XOR, Alu.LSH, Alu.RSH, Alu.ARSH, Alu.MUL, Alu.AND))
# a comparison with its operands swapped: a op b == b op' a
_MIRROR = {Jmp.JEQ: Jmp.JEQ, Jmp.JNE: Jmp.JNE, Jmp.JSET: Jmp.JSET, Jmp.JGT: Jmp.JLT, Jmp.JLT: Jmp.JGT,
           Jmp.JGE: Jmp.JLE, Jmp.JLE: Jmp.JGE, Jmp.JSGT: Jmp.JSLT, Jmp.JSLT: Jmp.JSGT, Jmp.JSGE: Jmp.JSLE,
           Jmp.JSLE: Jmp.JSGE}
# on values in [0, 2**31], signed and unsigned comparisons agree
_UNSIGNED = {Jmp.JEQ: Jmp.JEQ, Jmp.JNE: Jmp.JNE, Jmp.JSET: Jmp.JSET, Jmp.JGT: Jmp.JGT, Jmp.JLT: Jmp.JLT,
             Jmp.JGE: Jmp.JGE, Jmp.JLE: Jmp.JLE, Jmp.JSGT: Jmp.JGT, Jmp.JSLT: Jmp.JLT, Jmp.JSGE: Jmp.JGE,
             Jmp.JSLE: Jmp.JLE}


def _upper_zero(a: Analysis, i: int, reg: int) -> bool:
    v = a.values.reg(i, reg)
    return v.kind == Kind.SCALAR and v.tn.known_zero(_UPPER)


def _noop_alu(a: Analysis, i: int, ins: Insn) -> bool:
    if ins.off:
        return False
    c = ins.code
    op = c & OP_MASK
    w32 = c & CLASS_MASK == Class.ALU
    if w32 and not _upper_zero(a, i, ins.dst):
        return False
    k = (ins.imm & MASK32) if w32 else imm64(ins.imm)
    if op == Alu.MUL:
        return k == 1
    if op == Alu.AND:
        full = MASK32 if w32 else MASK64
        if k == full:
            return True
        v = a.values.reg(i, ins.dst)
        return v.kind == Kind.SCALAR and v.tn.known_zero(full & ~k)
    return k == 0


class Peephole(Pass):
    name = "peephole"
    summary = "self moves, jumps to the next insn, identity ALU ops, redundant masks, jset/jmp32/mirrored jumps"

    def find(self, a: Analysis, e: Edits) -> None:
        code = a.code
        insns = code.insns
        before = a.values.before
        targets = code.targets
        starts = a.block_starts
        n = len(insns)
        threaded: dict[int, list[int]] = {}  # goto index -> jumps to it that can go straight to its target
        for i, ins in enumerate(insns):
            if before[i] is None:
                continue
            c = ins.code
            nxt = insns[i + 1] if i + 1 < n and i + 1 not in starts else None
            if c == _MOV64_X and not ins.off:
                if ins.dst == ins.src:
                    self._drop(e, i)
                elif nxt is not None and nxt.code == _MOV64_X and not nxt.off and nxt.dst == ins.src and \
                        nxt.src == ins.dst:
                    self._drop(e, i + 1)
                elif nxt is not None and nxt.code in _AND_K:
                    self._mov_and_jne(a, e, i)
            elif c == _MOV32_X and not ins.off:
                if ins.dst == ins.src and _upper_zero(a, i, ins.dst):
                    self._drop(e, i)
                elif nxt is not None and nxt.code in COND_JUMPS and nxt.cls == Class.JMP:
                    self._zext_jump(a, e, i, ins, nxt)
            elif c in JUMPS:
                t = targets.get(i)
                if t == i + 1 and c & OP_MASK != Jmp.JCOND:
                    self._drop(e, i)
                elif t is not None and insns[t].code == _JA and targets.get(t) not in (t, None) and e.free(i):
                    threaded.setdefault(t, []).append(i)
            elif c in _ALU_K and _noop_alu(a, i, ins):
                self._drop(e, i)
            elif c in _AND_K and nxt is not None and nxt.code in _JNE_K:
                self._and_jne(a, e, i, ins, nxt)
            elif c in _MOV_K and nxt is not None and nxt.code in COND_JUMPS and nxt.code & Src.X:
                self._mirror(a, e, i, ins, nxt)
            elif c == _NEG64 and nxt is not None and nxt == Insn(c, ins.dst) and e.free(i, i + 1):
                e.delete |= {i, i + 1}
                e.rewrites += 1
        if threaded:
            self._thread(a, e, threaded)

    @staticmethod
    def _thread(a: Analysis, e: Edits, threaded: dict[int, list[int]]) -> None:
        """Send jumps to a ``goto`` where it goes. The verifier refuses unreachable code, so a ``goto`` that
        nothing reaches any more (no fall-through into it, every jump to it threaded) goes in the same edit."""
        insns = a.code.insns
        incoming: dict[int, int] = {}
        for t in a.code.targets.values():
            incoming[t] = incoming.get(t, 0) + 1
        for t, jumps in threaded.items():
            jumps = [i for i in jumps if e.free(i) and i != t]
            if not jumps:
                continue
            prev = insns[t - 1] if t > 0 and t not in a.code.funcs else None
            falls_in = prev is not None and prev.code not in (_JA, Class.JMP | Jmp.EXIT)
            orphaned = not falls_in and incoming.get(t, 0) == len(jumps)
            if orphaned and not e.free(t):
                continue
            for i in jumps:
                e.replace[i] = insns[i]
                e.retarget[i] = a.code.targets[t]
                e.rewrites += 1
            if orphaned:
                e.delete.add(t)

    @staticmethod
    def _drop(e: Edits, i: int) -> None:
        if e.free(i):
            e.delete.add(i)
            e.rewrites += 1

    def _and_jne(self, a: Analysis, e: Edits, i: int, ins: Insn, jmp: Insn, extra: tuple[int, ...] = (),
                 reg: int | None = None) -> bool:
        """``rX &= K; if rX != 0`` -> ``if rX & K`` (``reg``: test that register instead of rX)."""
        if jmp.dst != ins.dst or jmp.imm != 0 or not a.live.dead_after(i + 1, ins.dst) or ins.off:
            return False
        if not e.free(i, i + 1, *extra):
            return False
        cls = Class.JMP32 if (jmp.cls == Class.JMP32 or ins.cls == Class.ALU) else Class.JMP
        e.replace[i + 1] = Insn(cls | Jmp.JSET | Src.K, ins.dst if reg is None else reg, 0, jmp.off, ins.imm,
                                sym=jmp.sym)
        e.delete.add(i)
        e.delete.update(extra)
        e.rewrites += 1
        return True

    def _mov_and_jne(self, a: Analysis, e: Edits, i: int) -> None:
        """``rX = rY; rX &= K; if rX != 0`` -> ``if rY & K``."""
        insns = a.code.insns
        mov, land = insns[i], insns[i + 1]
        if i + 2 >= len(insns) or i + 2 in a.block_starts or land.dst != mov.dst or mov.src == 10:
            return
        jmp = insns[i + 2]
        if jmp.code not in _JNE_K:
            return
        if self._and_jne(a, e, i + 1, land, jmp, extra=(i,), reg=mov.src):
            pass

    def _zext_jump(self, a: Analysis, e: Edits, i: int, ins: Insn, jmp: Insn) -> None:
        """``wX = wY; if rX op K`` -> ``if wY op K``."""
        op = jmp.code & OP_MASK
        if jmp.code & Src.X or jmp.dst != ins.dst or not fits_unsigned(jmp.imm, 31) or op not in _UNSIGNED:
            return
        if not a.live.dead_after(i + 1, ins.dst) or not e.free(i, i + 1):
            return
        e.replace[i + 1] = Insn(Class.JMP32 | _UNSIGNED[Jmp(op)] | Src.K, ins.src, 0, jmp.off, jmp.imm, sym=jmp.sym)
        e.delete.add(i)
        e.rewrites += 1

    def _mirror(self, a: Analysis, e: Edits, i: int, ins: Insn, jmp: Insn) -> None:
        """``rX = K; if rX op rY`` -> ``if rY op' K``."""
        op = jmp.code & OP_MASK
        if jmp.dst != ins.dst or jmp.src == ins.dst or op not in _MIRROR or ins.off:
            return
        if ins.cls == Class.ALU and jmp.cls == Class.JMP and ins.imm < 0:
            return  # a zero-extended 32-bit constant the sign-extended immediate cannot express
        if not a.live.dead_after(i + 1, ins.dst) or not e.free(i, i + 1):
            return
        e.replace[i + 1] = Insn(jmp.cls | _MIRROR[Jmp(op)] | Src.K, jmp.src, 0, jmp.off, ins.imm, sym=jmp.sym)
        e.delete.add(i)
        e.rewrites += 1
