"""Which value each register holds before each instruction, named block-locally, over whole blocks.

``LocalDefs.value_id`` looks back at most ``WINDOW`` instructions (it answers one point at a time); the
Sysdig probe writes a struct's fields from pointers set up a hundred instructions earlier in the same block.
One forward scan per block (made the first time the block is asked about) names every register's value at
every instruction instead: ``("def", d, r)`` for register ``r`` as instruction ``d`` of the block wrote it,
``("in", start, r)`` for ``r``'s value on entry. A register copy (``rX = rY``, 64-bit) names the value it
copies: equal ids mean equal values, whichever register holds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsule.bpf.opcodes import NUM_REGS, Alu, Class, Src

if TYPE_CHECKING:
    from .analysis import Analysis

NREGS = NUM_REGS
ValueId = tuple[str, int, int]  # ("def", d, r) or ("in", start, r)
_MOV64_X = Class.ALU64 | Alu.MOV | Src.X
_REGS = (1 << NREGS) - 1


class BlockValues:
    def __init__(self, a: Analysis) -> None:
        self._effs = a.effects
        self._block_of = a.block_of
        self._insns = a.code.insns
        # filled a block at a time, on the first question about it (most blocks are never asked about)
        self._ids: list[tuple[ValueId, ...] | None] = [None] * len(self._insns)

    def _fill(self, at: int) -> None:
        """Name the values over the run of instructions with ``at``'s block (a run of equal ``block_of``)."""
        effs, block_of, insns, ids = self._effs, self._block_of, self._insns, self._ids
        blk = block_of[at]
        k = at
        while k and block_of[k - 1] == blk:
            k -= 1
        cur: list[ValueId] = [("in", blk, r) for r in range(NREGS)]
        n = len(insns)
        while k < n and block_of[k] == blk:
            ids[k] = tuple(cur)
            ins = insns[k]
            if ins.code == _MOV64_X and ins.off == 0:
                cur[ins.dst] = cur[ins.src]
            else:
                defs = effs[k].defs & _REGS
                while defs:
                    r = (defs & -defs).bit_length() - 1
                    cur[r] = ("def", k, r)
                    defs &= defs - 1
            k += 1

    def value_id(self, at: int, reg: int) -> ValueId:
        """The value ``reg`` holds just before ``at`` (equal ids: the same value, within one block)."""
        row = self._ids[at]
        if row is None:
            self._fill(at)
            row = self._ids[at]
            assert row is not None  # _fill named every instruction of at's block
        return row[reg]
