"""Code compaction: the same value in fewer or shorter instructions.

- ``rX <<= 32; rX >>= 32`` (zero-extending the low half) becomes ``wX = wX``, and ``rX = rY; rX <<= 32;
  rX >>= 32`` becomes ``wX = wY``;
- ``rX <<= 32; rX s>>= 32`` (sign-extending it) becomes ``rX = (s32)rX`` (movsx: cpu v4, Linux 6.6+);
- a plain ``ld_imm64`` (two slots) whose value fits a sign-extended 32-bit immediate becomes ``mov``, one that
  fits 32 unsigned bits becomes ``mov32`` (which zero-extends).
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Class, Pseudo, Src

from ..analysis import Analysis
from ..semantics import sext
from .base import Edits, Pass

_LSH32 = (Class.ALU64 | Alu.LSH | Src.K, 32)
_RSH32 = (Class.ALU64 | Alu.RSH | Src.K, 32)
_ARSH32 = (Class.ALU64 | Alu.ARSH | Src.K, 32)


def _shape(ins: Insn) -> tuple[int, int]:
    return (ins.code, ins.imm) if ins.off == 0 else (-1, 0)


class Compact(Pass):
    name = "compact"
    summary = "lsh/rsh 32 pairs to mov32/movsx, ld_imm64 of small values to mov"

    def __init__(self, movsx: bool = True) -> None:
        self.movsx = movsx

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        for i, ins in enumerate(insns):
            if not a.values.reachable(i) or not e.free(i):
                continue
            if ins.is_ld_imm64 and ins.src == Pseudo.NONE and ins.ref is None:
                v = ins.imm & ((1 << 64) - 1)
                s = sext(v, 64)
                if -(1 << 31) <= s < 1 << 31:
                    e.replace[i] = Insn(Class.ALU64 | Alu.MOV | Src.K, ins.dst, 0, 0, s, sym=ins.sym)
                elif v < 1 << 32:
                    e.replace[i] = Insn(Class.ALU | Alu.MOV | Src.K, ins.dst, 0, 0, sext(v, 32), sym=ins.sym)
                else:
                    continue
                e.rewrites += 1
                continue
            if _shape(ins) != _LSH32 or i + 1 >= len(insns) or (i + 1) in a.block_starts or not e.free(i + 1):
                continue
            nxt = insns[i + 1]
            if nxt.dst != ins.dst:
                continue
            if _shape(nxt) == _RSH32:
                src = ins.dst
                if i > 0 and i not in a.block_starts and e.free(i - 1):
                    prev = insns[i - 1]
                    if prev.code == (Class.ALU64 | Alu.MOV | Src.X) and prev.off == 0 and prev.dst == ins.dst:
                        src = prev.src
                        e.delete.add(i - 1)
                e.replace[i] = Insn(Class.ALU | Alu.MOV | Src.X, ins.dst, src, sym=ins.sym)
                e.delete.add(i + 1)
                e.rewrites += 1
            elif _shape(nxt) == _ARSH32 and self.movsx:
                e.replace[i] = Insn(Class.ALU64 | Alu.MOV | Src.X, ins.dst, ins.dst, 32, sym=ins.sym)
                e.delete.add(i + 1)
                e.rewrites += 1
