"""Which value each register holds before each instruction, named block-locally, over whole blocks.

``LocalDefs.value_id`` looks back at most ``WINDOW`` instructions (it answers one point at a time); the
Sysdig probe writes a struct's fields from pointers set up a hundred instructions earlier in the same block.
One forward scan per block names every register's value at every instruction instead: ``("def", d, r)``
for register ``r`` as instruction ``d`` of the block wrote it, ``("in", start, r)`` for ``r``'s value on
entry. A register copy (``rX = rY``, 64-bit) names the value it copies: equal ids mean
equal values, whichever register holds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsule.bpf.opcodes import Alu, Class, Src

if TYPE_CHECKING:
    from .analysis import Analysis

NREGS = 11
_MOV64_X = Class.ALU64 | Alu.MOV | Src.X


class BlockValues:
    def __init__(self, a: Analysis) -> None:
        effs = a.effects
        block_of = a.block_of
        insns = a.code.insns
        self._ids: list[tuple] = []
        cur: list[tuple] = []
        for k, e in enumerate(effs):
            if not k or block_of[k] != block_of[k - 1]:
                cur = [("in", block_of[k], r) for r in range(NREGS)]
            self._ids.append(tuple(cur))
            defs = e.defs
            ins = insns[k]
            if ins.code == _MOV64_X and ins.off == 0:
                cur[ins.dst] = cur[ins.src]
            elif defs:
                for r in range(NREGS):
                    if defs >> r & 1:
                        cur[r] = ("def", k, r)

    def value_id(self, at: int, reg: int) -> tuple:
        """The value ``reg`` holds just before ``at`` (equal ids: the same value, within one block)."""
        return self._ids[at][reg]
