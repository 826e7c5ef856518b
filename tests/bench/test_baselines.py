"""Exact figures of the benchmark programs are baselines, as the BPF Capsule repository keeps them: BPF
instructions, processed instructions and JITed bytes of every program of each object, and the region
transitions of one run, recorded in ``baselines.json``. A change to any of them fails here until the file is
updated in the same commit:

    .venv/bin/python -m pytest tests/bench/test_baselines.py --bless     (CAPSULE_SLOW=1 for Lua and zlib)

so a regression like fib's (15x native where it had been 6x, unnoticed for weeks) is seen the day it happens.
Timings are printed, never asserted. The integer kernels (tiny inputs) and the demo run in the regular suite;
Lua and zlib are ``slow``.
"""

from __future__ import annotations

import os

import pytest

from capsule.bench import integers

from . import baselines

SLOW = pytest.mark.slow
CASES = [*(pytest.param(k, id=k) for k in integers.KERNELS), pytest.param("demo", id="demo"),
         pytest.param("zlib-example", id="zlib-example", marks=SLOW), pytest.param("lua", id="lua", marks=SLOW)]


def _blessing(config: pytest.Config) -> bool:
    return bool(config.getoption("--bless")) or os.environ.get("CAPSULE_BLESS") == "1"


@pytest.mark.requires_bpf
@pytest.mark.parametrize("name", CASES)
def test_figures_match_the_baseline(name: str, request: pytest.FixtureRequest) -> None:
    m = baselines.measure_integer(name) if name in integers.KERNELS else baselines.measure_workload(name)
    total = sum(v for k, v in m.figures.items() if k.endswith(".processed"))
    print(f"\n{name}: BPF run time {m.bpf_ms:.2f} ms, load {m.load_s:.2f} s, processed {total:,}, "
          f"transitions {m.figures['transitions']:,}")
    if _blessing(request.config):
        baselines.bless(name, m.figures)
        return
    diffs, skipped = baselines.differences(name, m.figures)
    if skipped:
        print(f"not compared on kernel {baselines.kernel_release()} (recorded on another): {', '.join(skipped)}")
    assert not diffs, ("the figures changed; if that is intended, record them in the same commit "
                       "(pytest tests/bench/test_baselines.py --bless):\n  " + "\n  ".join(diffs))


def test_a_changed_figure_is_reported(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(baselines, "FILE", tmp_path / "baselines.json")
    figures = {"capsule_run.bpf_insns": 300, "capsule_run.processed": 480, "transitions": 7}
    baselines.bless("fib", figures)
    assert baselines.differences("fib", figures) == ([], [])
    diffs, _ = baselines.differences("fib", {**figures, "capsule_run.processed": 528})
    assert diffs == ["fib capsule_run.processed: 480 -> 528 (+10.0%)"]
    diffs, _ = baselines.differences("fib", {**figures, "capsule_run_1.bpf_insns": 9})
    assert diffs == ["fib capsule_run_1.bpf_insns: None -> 9"]
    assert baselines.differences("sort", figures)[0] == ["sort has no baseline in baselines.json"]


def test_a_tolerance_covers_only_its_program_and_figure(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(baselines, "FILE", tmp_path / "baselines.json")
    figures = {"capsule_run.processed": 10_000, "transitions": 1_000_000}
    baselines.bless("lua", figures)
    baselines.bless("demo", figures)
    assert baselines.differences("lua", {**figures, "transitions": 1_000_090}) == ([], [])
    assert baselines.differences("lua", {**figures, "transitions": 1_000_200})[0]
    assert baselines.differences("lua", {**figures, "capsule_run.processed": 10_001})[0]
    assert baselines.differences("demo", {**figures, "transitions": 1_000_001})[0]


def test_kernel_dependent_figures_are_compared_on_the_recorded_kernel_only(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(baselines, "FILE", tmp_path / "baselines.json")
    baselines.bless("fib", {"capsule_run.bpf_insns": 300, "capsule_run.processed": 480})
    monkeypatch.setattr(baselines, "kernel_release", lambda: "5.15")
    diffs, skipped = baselines.differences("fib", {"capsule_run.bpf_insns": 301, "capsule_run.processed": 1})
    assert diffs == ["fib capsule_run.bpf_insns: 300 -> 301 (+0.3%)"] and skipped == ["capsule_run.processed"]
