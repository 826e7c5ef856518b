"""Reaching definitions and def-use chains over registers.

A definition is an instruction index; ``ENTRY`` stands for "the value the register had when the function
was entered" (arguments, the context in ``r1``, the frame pointer). Calls define ``r0``-``r5`` (``r1``-``r5``
as clobbered). Passes use the chains to ask "is this value used anywhere else?" before folding the
instructions that computed it into one.

Per instruction the reaching definitions are a tuple of eleven frozensets, shared between instructions that
define nothing; blocks are visited in reverse post-order from a heap, so acyclic code is walked once.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from capsule.bpf.opcodes import NUM_REGS

from .cfg import CFG
from .effects import Effect, effects, regs_of

__all__ = ["ENTRY", "DefUse", "def_use"]

ENTRY = -1

Defs = tuple[frozenset[int], ...]


@dataclass
class DefUse:
    reaching: list[Defs]  # per instruction: definitions of each register reaching it (before it runs)
    uses_of: dict[int, set[int]]  # definition (insn index) -> instructions reading that value

    def defs_at(self, i: int, reg: int) -> frozenset[int]:
        return self.reaching[i][reg]

    def single_def(self, i: int, reg: int) -> int | None:
        d = self.reaching[i][reg]
        if len(d) == 1:
            (only,) = d
            return only
        return None


def def_use(cfg: CFG, effs: list[Effect] | None = None) -> DefUse:
    insns = cfg.code.insns
    n = len(insns)
    empty: Defs = tuple(frozenset() for _ in range(NUM_REGS))
    reaching: list[Defs] = [empty] * n
    effs = effs if effs is not None else effects(insns)
    defined = [regs_of(e.defs) for e in effs]
    entry: Defs = tuple(frozenset({ENTRY}) for _ in range(NUM_REGS))
    for fn in cfg.functions.values():
        block_in: dict[int, Defs] = {fn.start: entry}
        order = fn.rpo()
        rank = {b: k for k, b in enumerate(order)}
        heap = [0]
        queued = {fn.start}
        while heap:
            bs = order[heapq.heappop(heap)]
            queued.discard(bs)
            cur = block_in[bs]
            b = fn.blocks[bs]
            for i in range(b.start, b.end):
                reaching[i] = cur
                d = defined[i]
                if d:
                    state = list(cur)
                    one = frozenset((i,))
                    for r in d:
                        state[r] = one
                    cur = tuple(state)
            for s in b.succs:
                old = block_in.get(s)
                if old is None:
                    block_in[s] = cur
                elif old is cur:
                    continue
                else:
                    new = tuple(a if a is c or c <= a else a | c for a, c in zip(old, cur, strict=True))
                    if new == old:
                        continue
                    block_in[s] = new
                if s not in queued:
                    queued.add(s)
                    heapq.heappush(heap, rank[s])
    uses_of: dict[int, set[int]] = {}
    for i in range(n):
        u = effs[i].uses
        if not u:
            continue
        ri = reaching[i]
        for r in regs_of(u):
            for def_at in ri[r]:
                users = uses_of.get(def_at)
                if users is None:
                    uses_of[def_at] = {i}
                else:
                    users.add(i)
    return DefUse(reaching, uses_of)
