"""Block-local def-use (``capsule.opt.local``): the windowed and whole-block questions, and answers that
outlive their analysis."""

from __future__ import annotations

from capsule.bpf.asm import (
    R2,
)
from capsule.opt.analysis import Analysis
from capsule.opt.blockvals import NREGS
from capsule.opt.rewrite import Code

from .fixtures import branchy_prog, sample_programs


def test_uses_in_block_is_uses_within_without_the_window() -> None:
    ps = branchy_prog()
    a = Analysis.of(Code.from_program(ps), ps.type)
    loc, effs, block_of, live_out = a.local, a.effects, a.block_of, a.live.live_out

    def scan(d: int, reg: int, allowed: set[int]) -> bool:
        m = d + 1
        while m < len(effs) and block_of[m] == block_of[d]:
            if effs[m].uses >> reg & 1 and m not in allowed:
                return False
            if effs[m].defs >> reg & 1:
                return True
            m += 1
        return not live_out[m - 1] >> reg & 1

    far = 0
    for d in range(len(effs)):
        for reg in range(NREGS):
            readers = [m for m in range(d + 1, len(effs)) if effs[m].uses >> reg & 1][:2]
            for allowed in (set(), set(readers[:1]), set(readers)):
                got = loc.uses_in_block(d, reg, allowed)
                assert got == scan(d, reg, allowed), (d, reg, allowed)
                if got and not loc.uses_within(d, reg, allowed):
                    far += 1  # the windowed question gives up here
    assert far  # the fixture does reach past the window


def test_local_defs_work_after_their_analysis_is_gone() -> None:
    ps = sample_programs()[1]
    a = Analysis(Code.from_program(ps), ps.type)
    loc = a.local
    expected = [loc.uses_within(d, R2, frozenset()) for d in (2, 3)]
    loc2 = Analysis(Code.from_program(ps), ps.type).local  # its analysis is freed at once
    assert loc2.a is None
    assert [loc2.uses_within(d, R2, frozenset()) for d in (2, 3)] == expected == [False, True]
