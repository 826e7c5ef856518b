"""Peephole: instructions that do nothing, found one or two at a time.

- ``rX = rX`` (64-bit move to itself), and ``wX = wX`` when the upper half is already known to be zero;
- jumps (conditional or not) to the very next instruction;
- identities: ``+= 0``, ``-= 0``, ``|= 0``, ``^= 0``, shifts by 0, ``*= 1``, ``&= -1`` (32-bit forms only when
  the upper half is known zero, since they clear it), and ``&= K`` when known bits show the mask removes
  nothing;
- ``neg rX; neg rX`` (double negation) back to back;
- ``rX = rY; rY = rX``: the second move is redundant.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Class, Src

from ..analysis import Analysis
from ..semantics import M32, M64, imm64
from ..values import Kind
from .base import Edits, Pass

_UPPER = M64 ^ M32


def _upper_zero(a: Analysis, i: int, reg: int) -> bool:
    v = a.values.reg(i, reg)
    return v.kind == Kind.SCALAR and v.tn.known_zero(_UPPER)


def _is_mov_x(ins: Insn) -> bool:
    return ins.code == (Class.ALU64 | Alu.MOV | Src.X) and ins.off == 0


def _noop_alu(a: Analysis, i: int, ins: Insn) -> bool:
    if ins.cls not in (Class.ALU, Class.ALU64) or ins.code & Src.X or ins.off:
        return False
    op = ins.code & 0xF0
    w32 = ins.cls == Class.ALU
    if w32 and not _upper_zero(a, i, ins.dst):
        return False
    k = (ins.imm & M32) if w32 else imm64(ins.imm)
    if op in (Alu.ADD, Alu.SUB, Alu.OR, Alu.XOR, Alu.LSH, Alu.RSH, Alu.ARSH) and k == 0:
        return True
    if op == Alu.MUL and k == 1:
        return True
    if op == Alu.AND:
        v = a.values.reg(i, ins.dst)
        full = M32 if w32 else M64
        if k == full:
            return True
        return v.kind == Kind.SCALAR and v.tn.known_zero(full & ~k)
    return False


class Peephole(Pass):
    name = "peephole"
    summary = "self moves, jumps to the next insn, identity ALU ops, redundant masks, double neg/moves"

    def find(self, a: Analysis, e: Edits) -> None:
        code = a.code
        insns = code.insns
        for i, ins in enumerate(insns):
            if not a.values.reachable(i) or not e.free(i):
                continue
            if _is_mov_x(ins) and ins.dst == ins.src:
                e.delete.add(i)
            elif ins.code == (Class.ALU | Alu.MOV | Src.X) and ins.off == 0 and ins.dst == ins.src and \
                    _upper_zero(a, i, ins.dst):
                e.delete.add(i)
            elif ins.is_jump and code.targets.get(i) == i + 1 and (ins.code & 0xF0) != 0xE0:
                e.delete.add(i)
            elif _noop_alu(a, i, ins):
                e.delete.add(i)
            elif i + 1 < len(insns) and i + 1 not in a.block_starts and e.free(i + 1):
                nxt = insns[i + 1]
                if (ins.code & 0xF0) == Alu.NEG and ins.cls in (Class.ALU64,) and nxt == Insn(ins.code, ins.dst):
                    e.delete |= {i, i + 1}
                elif _is_mov_x(ins) and _is_mov_x(nxt) and nxt.dst == ins.src and nxt.src == ins.dst:
                    e.delete.add(i + 1)
                else:
                    continue
            else:
                continue
            e.rewrites += 1
