"""Block-local def-use questions, answered by scanning the block (no global reaching definitions).

The pattern passes only combine instructions of one basic block, so what they ask is local: "which
instruction of this block last wrote ``rX`` before ``i``?", "is the value written at ``d`` read by ``i`` and
nothing else?". Scanning the block with the cached per-instruction effects, plus register liveness at the
block's end, answers that exactly and far more cheaply than global def-use chains (which cost tens of
microseconds per instruction on large unrolled programs).

A value is identified by ``value_id``: ``("def", d)`` for the instruction ``d`` of the block that wrote it,
``("in", start)`` for the value the register had when the block was entered. Two points of one block see the
same value of a register exactly when their ids are equal.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from typing import TYPE_CHECKING

from capsule.bpf.opcodes import NUM_REGS

from .liveness import liveness

if TYPE_CHECKING:
    from .analysis import Analysis

__all__ = ["LocalDefs", "WINDOW", "FAR"]

_REGS = (1 << NUM_REGS) - 1
WINDOW = 64  # how far the scans look (patterns are short; long blocks must not make them quadratic)
FAR = -2


class LocalDefs:
    def __init__(self, a: Analysis) -> None:
        # the analysis owns this object: a strong reference back would be a reference cycle
        self._a = weakref.ref(a)
        self._cfg = a.cfg
        self._live_out: list[int] | None = None
        self.effects = a.effects
        self.block_of = a.block_of
        # block start -> (end, per register: the block's instructions reading it, those writing it), built on
        # the first ``uses_in_block`` about the block
        self._index: dict[int, tuple[int, list[list[int]], list[list[int]]]] = {}

    @property
    def a(self) -> Analysis | None:
        """The analysis this belongs to (None once it is gone)."""
        return self._a()

    def live_out(self) -> list[int]:
        """Registers live after each instruction: the analysis' (shared), or computed here if it is gone."""
        if self._live_out is None:
            a = self._a()
            self._live_out = a.live.live_out if a is not None else liveness(self._cfg, self.effects).live_out
        return self._live_out

    def def_before(self, at: int, reg: int) -> int | None:
        """The last instruction of ``at``'s block before ``at`` that writes ``reg`` (None: none does;
        ``FAR`` when it lies further back than ``WINDOW`` instructions, which callers treat as unknown)."""
        bit = 1 << reg
        start = max(self.block_of[at], at - WINDOW)
        effs = self.effects
        for m in range(at - 1, start - 1, -1):
            if effs[m].defs & bit:
                return m
        return None if start == self.block_of[at] else FAR

    def value_id(self, at: int, reg: int) -> tuple[str, int, int]:
        d = self.def_before(at, reg)
        if d == FAR:
            return ("far", at, reg)  # equal to no other id: never taken for the same value
        return ("in", self.block_of[at], 0) if d is None else ("def", d, 0)

    def uses_within(self, d: int, reg: int, allowed: set[int] | frozenset[int]) -> bool:
        """Whether every read of the value ``d`` writes to ``reg`` is one of ``allowed``."""
        bit = 1 << reg
        effs = self.effects
        blk = self.block_of[d]
        n = len(effs)
        m = d + 1
        limit = min(n, d + 1 + WINDOW)
        while m < n and self.block_of[m] == blk:
            if m >= limit:
                return False  # too far to look: assume another reader
            e = effs[m]
            if e.uses & bit and m not in allowed:
                return False
            if e.defs & bit:
                return True
            m += 1
        return not self.live_out()[m - 1] & bit

    def uses_in_block(self, d: int, reg: int, allowed: set[int] | frozenset[int]) -> bool:
        """``uses_within`` looking as far as the block goes (no ``WINDOW``): indexed, so a long block costs a
        scan once rather than per question."""
        blk = self.block_of[d]
        idx = self._index.get(blk)
        if idx is None:
            idx = self._index[blk] = self._build(blk)
        end, uses, defs = idx
        bit = 1 << reg
        if not blk <= d < end:  # (an instruction outside every block: no run of its own to index)
            return self._scan(d, reg, allowed)
        ds = defs[reg]
        k = bisect_right(ds, d)
        nxt = ds[k] if k < len(ds) else end  # the next write (an instruction reads before it writes)
        us = uses[reg]
        for k in range(bisect_right(us, d), len(us)):
            m = us[k]
            if m > nxt:
                break
            if m not in allowed:
                return False
        return nxt < end or not self.live_out()[end - 1] & bit

    def _scan(self, d: int, reg: int, allowed: set[int] | frozenset[int]) -> bool:
        bit = 1 << reg
        effs, blk = self.effects, self.block_of[d]
        m = d + 1
        while m < len(effs) and self.block_of[m] == blk:
            if effs[m].uses & bit and m not in allowed:
                return False
            if effs[m].defs & bit:
                return True
            m += 1
        return not self.live_out()[m - 1] & bit

    def _build(self, blk: int) -> tuple[int, list[list[int]], list[list[int]]]:
        effs, block_of = self.effects, self.block_of
        uses: list[list[int]] = [[] for _ in range(NUM_REGS)]
        defs: list[list[int]] = [[] for _ in range(NUM_REGS)]
        m, n = blk, len(effs)
        while m < n and block_of[m] == blk:
            e = effs[m]
            for bits, out in ((e.uses & _REGS, uses), (e.defs & _REGS, defs)):
                while bits:
                    out[(bits & -bits).bit_length() - 1].append(m)
                    bits &= bits - 1
            m += 1
        return m, uses, defs

    def only_use(self, d: int, reg: int, at: int) -> bool:
        """Whether the value ``d`` writes to ``reg`` is read by ``at`` and by nothing else."""
        return self.def_before(at, reg) == d and self.uses_within(d, reg, {at})
