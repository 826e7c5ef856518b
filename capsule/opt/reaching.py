"""Reaching definitions and def-use chains over registers.

A definition is an instruction index; ``ENTRY`` stands for "the value the register had when the function
was entered" (arguments, the context in ``r1``, the frame pointer). Calls define ``r0``-``r5`` (``r1``-``r5``
as clobbered). Passes use the chains to ask "is this value used anywhere else?" before folding the
instructions that computed it into one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cfg import CFG
from .effects import effect

__all__ = ["ENTRY", "DefUse", "def_use"]

ENTRY = -1
_NREGS = 11

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


def def_use(cfg: CFG) -> DefUse:
    n = len(cfg.code.insns)
    empty: Defs = tuple(frozenset() for _ in range(_NREGS))
    reaching: list[Defs] = [empty] * n
    effects = [effect(ins) for ins in cfg.code.insns]
    for fn in cfg.functions.values():
        entry: Defs = tuple(frozenset({ENTRY}) for _ in range(_NREGS))
        block_in: dict[int, Defs | None] = {b: None for b in fn.blocks}
        block_in[fn.start] = entry
        order = fn.rpo()
        changed = True
        while changed:
            changed = False
            for bs in order:
                cur = block_in[bs]
                if cur is None:
                    continue
                b = fn.blocks[bs]
                state = list(cur)
                for i in b.indices():
                    reaching[i] = tuple(state)
                    d = effects[i].defs
                    if d:
                        for r in range(_NREGS):
                            if d & (1 << r):
                                state[r] = frozenset({i})
                out = tuple(state)
                for s in b.succs:
                    old = block_in[s]
                    new = out if old is None else tuple(a | c for a, c in zip(old, out, strict=True))
                    if new != old:
                        block_in[s] = new
                        changed = True
    uses_of: dict[int, set[int]] = {}
    for i in range(n):
        u = effects[i].uses
        for r in range(_NREGS):
            if u & (1 << r):
                for d in reaching[i][r]:
                    uses_of.setdefault(d, set()).add(i)
    return DefUse(reaching, uses_of)
