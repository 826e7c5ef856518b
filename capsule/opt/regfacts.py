"""What each register holds, as a forward must-analysis: a register holds a fact (how its value was made) at a
point when every path there made it that way and nothing wrote the register since.

The passes that reuse a value another register already holds (``reuse``, ``pktreuse``) differ only in their
facts and in how one instruction changes them (``step``); this is their shared solver. Facts are hashable values
compared by equality; the meet of two paths keeps a register's fact only where both agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable
from typing import TypeVar

from capsule.bpf.opcodes import NUM_REGS

from .analysis import Analysis

__all__ = ["Held", "Step", "NREGS", "NOTHING", "must_hold"]

NREGS = NUM_REGS
Fact = TypeVar("Fact", bound=Hashable)
Held = tuple[Fact | None, ...]  # per register: its fact, or None
NOTHING: tuple[None, ...] = (None,) * NREGS
# updates the per-register facts (a list of NREGS) for instruction i
Step = Callable[[int, list[Fact | None]], None]


def must_hold(a: Analysis, step: Step[Fact], at: Collection[int] | None = None) -> dict[int, Held[Fact]]:
    """The facts before each reachable instruction of ``at`` (every instruction when ``at`` is None)."""
    out: dict[int, Held[Fact]] = {}
    for fn in a.cfg.functions.values():
        order = fn.rpo()
        rank = {b: k for k, b in enumerate(order)}
        block_in: dict[int, Held[Fact]] = {fn.start: NOTHING}
        heap, queued = [0], {fn.start}
        while heap:  # to a fixpoint, blocks in reverse postorder (joins only forget, so it ends)
            bs = order[heapq.heappop(heap)]
            queued.discard(bs)
            b = fn.blocks[bs]
            cur = list(block_in[bs])
            for i in range(b.start, b.end):
                step(i, cur)
            end = tuple(cur)
            for s in b.succs:
                old = block_in.get(s)
                new = end if old is None else tuple(x if x == y else None for x, y in zip(old, end, strict=True))
                if new != old:
                    block_in[s] = new
                    if s not in queued:
                        queued.add(s)
                        heapq.heappush(heap, rank[s])
        for bs in order:
            b = fn.blocks[bs]
            if at is not None and not any(i in at for i in range(b.start, b.end)):
                continue
            cur = list(block_in[bs])
            for i in range(b.start, b.end):
                if at is None or i in at:
                    out[i] = tuple(cur)
                step(i, cur)
    return out
