"""All analyses of one ``Code``, computed on first use and valid until the code is edited."""

from __future__ import annotations

from functools import cached_property

from .cfg import CFG, build_cfg
from .liveness import Liveness, StackLiveness, liveness, stack_liveness
from .reaching import DefUse, def_use
from .rewrite import Code
from .values import Values, analyze_values

__all__ = ["Analysis"]


class Analysis:
    def __init__(self, code: Code, prog_type: int) -> None:
        self.code = code
        self.prog_type = prog_type

    @cached_property
    def cfg(self) -> CFG:
        return build_cfg(self.code)

    @cached_property
    def live(self) -> Liveness:
        return liveness(self.cfg)

    @cached_property
    def stack(self) -> StackLiveness:
        return stack_liveness(self.cfg)

    @cached_property
    def du(self) -> DefUse:
        return def_use(self.cfg)

    @cached_property
    def values(self) -> Values:
        return analyze_values(self.cfg, self.prog_type)

    @cached_property
    def block_starts(self) -> set[int]:
        return {b for fn in self.cfg.functions.values() for b in fn.blocks}

    @cached_property
    def block_of(self) -> list[int]:
        """Instruction index -> start of its basic block."""
        out = [0] * len(self.code.insns)
        for fn in self.cfg.functions.values():
            for b in fn.blocks.values():
                for i in b.indices():
                    out[i] = b.start
        return out
