"""Copy propagation: ``rX = rY`` goes when the instructions that read the copy can read ``rY`` instead.

Within one basic block, the copy's readers (up to the next write of ``rX``, or the block's end with ``rX``
dead there) must each name ``rX`` only as an explicit operand another register can stand in for: the source
of an ALU operation, the base or the value of a load or store, an operand of a conditional jump. Implicit
readers (a call's arguments, ``exit``'s ``r0``) and instructions that also write ``rX`` (``rX += 1``) keep the
copy, as does ``rY`` changing while ``rX`` is still read. A copy of ``r10`` is only propagated into memory
accesses (``*(u64 *)(r10 - 8)``): the verifier refuses ``r10`` in arithmetic and comparisons.

The verifier sees the same values: a 64-bit ``mov`` gives ``rX`` ``rY``'s type, offset and range (and links
their scalar ranges), so reading ``rY`` directly is checked exactly as reading the copy was; a bounds check on
``rY`` now narrows ``rY`` itself.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CLASS_MASK, FP, MODE_MASK, OP_MASK, Alu, Class, Jmp, Mode, Src

from ..analysis import Analysis
from ..effects import CALL, EXIT, Effect
from ..local import WINDOW
from .base import Edits, Pass

_MOV64_X = int(Class.ALU64 | Alu.MOV | Src.X)


def _substitutable(ins: Insn, x: int, y: int) -> bool:
    """Whether ``ins`` reads ``x`` only where ``y`` could be read instead."""
    c = ins.code
    cls = c & CLASS_MASK
    if c == CALL or c == EXIT or cls == Class.LD:
        return False
    if cls in (Class.ALU, Class.ALU64):
        return ins.dst != x and bool(c & Src.X) and y != FP
    if cls == Class.STX and c & MODE_MASK == Mode.ATOMIC:
        return False
    if cls in (Class.JMP, Class.JMP32):
        return y != FP and c & OP_MASK not in (Jmp.JA, Jmp.JCOND)
    if cls == Class.STX and ins.src == x and y == FP:
        return False  # spilling the frame pointer itself: keep it as it was
    return cls in (Class.LDX, Class.ST, Class.STX)


def _rename(ins: Insn, x: int, y: int) -> Insn:
    cls = ins.code & CLASS_MASK
    dst = y if ins.dst == x and cls not in (Class.ALU, Class.ALU64, Class.LDX) else ins.dst
    src = y if ins.src == x else ins.src
    return Insn(ins.code, dst, src, ins.off, ins.imm, ins.ref, ins.sym)


class CopyProp(Pass):
    name = "copyprop"
    summary = "register copies whose readers in the block can read the original register instead"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        effs = a.effects
        live_out = a.live.live_out
        for fn in a.cfg.functions.values():
            for bs in fn.reachable():
                b = fn.blocks[bs]
                for i in range(b.start, b.end):
                    ins = insns[i]
                    if ins.code != _MOV64_X or ins.off or ins.dst == ins.src or ins.dst == FP:
                        continue
                    readers = self._readers(insns, effs, live_out, i, b.end)
                    if readers is None or not e.free(i, *readers):
                        continue
                    x, y = ins.dst, ins.src
                    for m in readers:
                        e.replace[m] = _rename(insns[m], x, y)
                    e.delete.add(i)
                    e.rewrites += 1

    @staticmethod
    def _readers(insns: list[Insn], effs: list[Effect], live_out: list[int], i: int, end: int) -> list[int] | None:
        """The instructions reading the copy made at ``i``, when all of them can read the original."""
        x, y = insns[i].dst, insns[i].src
        readers: list[int] = []
        for m in range(i + 1, min(end, i + 1 + WINDOW)):
            ef = effs[m]
            if ef.uses >> x & 1:
                if not _substitutable(insns[m], x, y):
                    return None
                readers.append(m)
            if ef.defs >> x & 1:
                return readers
            if ef.defs >> y & 1:
                return None if live_out[m] >> x & 1 else readers
        if end > i + 1 + WINDOW:
            return None
        return None if live_out[end - 1] >> x & 1 else readers


__all__ = ["CopyProp"]
