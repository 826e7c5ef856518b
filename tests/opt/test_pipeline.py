"""The pipeline (``capsule.opt.pipeline``): NPI refusals apart from failures, passes skipped on code they
left unchanged, and no reference cycles (it runs with the cyclic collector paused)."""

from __future__ import annotations

import gc

from capsule.bpf.asm import (
    R0,
    R1,
    alu,
    exit_,
    mov,
)
from capsule.bpf.opcodes import Alu
from capsule.opt.analysis import Analysis
from capsule.opt.check import NPI_REFUSED
from capsule.opt.passes import Edits, Pass
from capsule.opt.pipeline import make_passes, optimize_program
from capsule.opt.rewrite import Code

from .fixtures import SYS, prog, sample_programs


class _Counting(Pass):
    """Wraps a pass, counting the codes it is run on."""

    def __init__(self, inner: Pass) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[Code] = []

    def find(self, a: Analysis, e: Edits) -> None:
        self.seen.append(a.code)
        self.inner.find(a, e)


class _Unskippable(_Counting):
    """A ``run`` of its own that changes the code after ``Pass.run`` (here only its identity)."""

    def run(self, code: Code, prog_type: int) -> tuple[Code, int]:
        out = Pass.run(self, code, prog_type)
        return out[0].copy(), out[1]  # not the code its last round looked at


def test_npi_refusals_are_recorded_apart_from_failures() -> None:
    ps = prog(mov(R1, 5), alu(Alu.ADD, R1, 3), mov(R0, R1), exit_(), ptype=SYS)

    def check(name: str, candidate) -> str | None:
        return f"{NPI_REFUSED}: 3 -> 4"

    r = optimize_program(ps, make_passes(), check)
    assert r.records and not r.failed() and r.npi_refused() == r.rolled_back()
    assert r.optimized is ps


def test_optimizing_leaves_no_reference_cycles() -> None:
    progs = sample_programs()
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for ps in progs:
            optimize_program(ps, make_passes())
        found = gc.collect()
    finally:
        if was:
            gc.enable()
    assert found == 0  # everything the optimizer dropped was freed by reference counting


def test_optimizing_restores_the_collector_state() -> None:
    ps = sample_programs()[0]
    assert gc.isenabled()
    optimize_program(ps, make_passes())
    assert gc.isenabled()
    gc.disable()
    try:
        optimize_program(ps, make_passes())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_pipeline_skips_a_pass_on_code_it_left_unchanged_with_the_same_result() -> None:
    # constprop folds and removes the dead mov in the first round; nothing changes after it, so in the second
    # round every pass would meet the code it already found nothing in
    ps = prog(mov(R1, 4), alu(Alu.ADD, R1, 1), mov(R0, R1), exit_())
    counted = [_Counting(p) for p in make_passes()]
    every = [_Unskippable(p) for p in make_passes()]
    res = optimize_program(ps, counted)
    assert res.optimized.insns == optimize_program(ps, every).optimized.insns
    assert [(r.name, r.rewrites, r.after) for r in res.records] == [
        (r.name, r.rewrites, r.after) for r in optimize_program(ps, make_passes()).records]
    for p in counted:
        assert len({id(c) for c in p.seen}) == len(p.seen)  # never asked twice about the same code
    assert sum(len(p.seen) for p in counted) < sum(len(p.seen) for p in every)
    # in the second round only the passes before constprop meet code they have not seen; without skipping,
    # every pass runs again
    later = [p.name for p in counted][[p.name for p in counted].index("constprop") + 1:]
    assert later and all(len(p.seen) == 1 for p in counted if p.name in later)
    assert all(len(p.seen) == 2 for p in every if p.name in later)
