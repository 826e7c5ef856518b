"""All analyses of one ``Code``, computed on first use and valid until the code is edited.

``Analysis.of`` keeps the analysis on the ``Code`` it describes, so consecutive passes that look at the same
(unchanged) code share one: the pipeline pays for an analysis per *version* of the code, not per pass.
Edits never mutate a ``Code``; they make a new one.
"""

from __future__ import annotations

from functools import cached_property

from .cfg import CFG, build_cfg
from .effects import Effect, effects
from .liveness import Liveness, StackLiveness, faint, liveness, stack_liveness
from .local import LocalDefs
from .reaching import DefUse, def_use
from .rewrite import Code
from .values import Values, analyze_values

__all__ = ["Analysis"]


class Analysis:
    def __init__(self, code: Code, prog_type: int) -> None:
        self.code = code
        self.prog_type = prog_type

    @staticmethod
    def of(code: Code, prog_type: int) -> Analysis:
        """The (shared) analysis of ``code``."""
        cached = code.__dict__.get("_analysis")
        if cached is None or cached.prog_type != prog_type:
            cached = Analysis(code, prog_type)
            code.__dict__["_analysis"] = cached
        return cached

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
