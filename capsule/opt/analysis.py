"""All analyses of one ``Code``, computed on first use and valid until the code is edited.

``Analysis.of`` remembers the analyses of the last few ``Code`` objects it was asked about, so consecutive
passes that look at the same (unchanged) code share one: the pipeline pays for an analysis per *version* of
the code, not per pass. Edits never mutate a ``Code``; they make a new one. The memo lives here rather than on
the ``Code`` so that a code and its analysis form no reference cycle: both are freed by reference counting as
soon as they are no longer used, and the optimizer leaves no work for the cyclic garbage collector.
"""

from __future__ import annotations

from functools import cached_property

from . import liveness as liveness_memo
from . import values
from .cfg import CFG, build_cfg
from .effects import Effect, effects
from .liveness import Liveness, StackLiveness, faint, liveness, stack_liveness
from .local import LocalDefs
from .reaching import DefUse, def_use
from .rewrite import Code
from .values import Values, analyze_values

__all__ = ["Analysis"]

# the most recent analyses, newest last. An entry keeps its ``Code`` alive, so an ``id`` here always names the
# code it was taken of. A few suffice: passes run one after the other on the newest code, and a result the
# checker refuses sends the pipeline back to the code the pass started from (recomputed if it was dropped).
_MEMO_SIZE = 4
_memo: dict[int, Analysis] = {}


class Analysis:
    def __init__(self, code: Code, prog_type: int) -> None:
        self.code = code
        self.prog_type = prog_type

    @staticmethod
    def of(code: Code, prog_type: int) -> Analysis:
        """The (shared) analysis of ``code``."""
        key = id(code)
        cached = _memo.pop(key, None)
        if cached is None or cached.code is not code or cached.prog_type != prog_type:
            cached = Analysis(code, prog_type)
        _memo[key] = cached
        while len(_memo) > _MEMO_SIZE:
            del _memo[next(iter(_memo))]
        return cached

    @staticmethod
    def forget() -> None:
        """Drop the remembered analyses (and the code they keep alive), and the per-function and per-block
        results the value and liveness analyses keep for the next version."""
        _memo.clear()
        values.forget()
        liveness_memo.forget()

    @cached_property
    def effects(self) -> list[Effect]:
        return effects(self.code.insns)

    @cached_property
    def cfg(self) -> CFG:
        return build_cfg(self.code)

    @cached_property
    def live(self) -> Liveness:
        return liveness(self.cfg, self.effects)

    @cached_property
    def faint(self) -> set[int]:
        """Removable instructions whose results nothing useful reads (``liveness.faint``)."""
        return faint(self.cfg, self.effects)

    @cached_property
    def stack(self) -> StackLiveness:
        return stack_liveness(self.cfg, self.effects, self.values)

    @cached_property
    def du(self) -> DefUse:
        return def_use(self.cfg, self.effects)

    @cached_property
    def values(self) -> Values:
        return analyze_values(self.cfg, self.prog_type)

    @cached_property
    def local(self) -> LocalDefs:
        """Block-local def-use (what the pattern passes ask; much cheaper than ``du``)."""
        return LocalDefs(self)

    @cached_property
    def block_starts(self) -> set[int]:
        return {b for fn in self.cfg.functions.values() for b in fn.blocks}

    @cached_property
    def block_of(self) -> list[int]:
        """Instruction index -> start of its basic block."""
        out = [0] * len(self.code.insns)
        for fn in self.cfg.functions.values():
            for b in fn.blocks.values():
                out[b.start:b.end] = [b.start] * (b.end - b.start)
        return out
