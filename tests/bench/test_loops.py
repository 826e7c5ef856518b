"""The loop-mechanism benchmark: every generated program loads and computes the right sum, every limit is
reported as a status (never a wrong sum), and ``capsule bench loops`` prints every mechanism. No timing is
asserted: timings depend on the machine."""

from __future__ import annotations

import argparse
import errno
import json
from dataclasses import replace

import pytest

from capsule.bench.loop_programs import (
    BPF_MAX_LOOPS,
    GENERATED_KEYS,
    MECHANISMS,
    STATUS_CUT,
    generate,
)
from capsule.bench.loop_runner import Loaded, LoopBench, Rejected, RunSample, verdict
from capsule.bench.loop_scaling import plot_scaling, run_scaling
from capsule.bench.loops import run_loops
from capsule.bench.wasm_loop import PROFILES, WasmLoop, expected_sum, module_bytes
from capsule.bpf.spec import ProgramSpec
from capsule.cli.bench import add_parsers
from capsule.kernel import Program, ProgType, VerifierError
from capsule.kernel.collection import resolve_refs

RUNNABLE = list(GENERATED_KEYS)
WASM_ROWS = list(PROFILES)


pytestmark = pytest.mark.usefixtures("no_kernel_fd_leak")  # matplotlib keeps its font file open for good


@pytest.fixture
def bench():
    with LoopBench() as b:
        yield b


def load_ok(bench: LoopBench, mech: str, n: int, body: int = 1, **kw) -> Loaded:
    loaded = bench.load(generate(mech, n, body, **kw))
    assert isinstance(loaded, Loaded), f"{mech} n={n}: {loaded}"
    return loaded


@pytest.mark.requires_bpf
@pytest.mark.parametrize("mech", RUNNABLE)
def test_every_mechanism_sums_correctly(bench: LoopBench, mech: str) -> None:
    for n in (0, 1, 7, 10_000):
        loaded = load_ok(bench, mech, n)
        try:
            for repeat in (1, 3):
                s = bench.run(loaded, repeat)
                assert (s.sum, s.iterations, s.status) == (n * (n - 1) // 2, n, 0), (mech, n, repeat)
                assert verdict(loaded.lp, s).text == "ok"
                assert s.duration_ns > 0 and s.ktime_ns > 0
        finally:
            loaded.close()


@pytest.mark.requires_bpf
@pytest.mark.parametrize("mech", RUNNABLE)
def test_bigger_bodies_sum_body_times(bench: LoopBench, mech: str) -> None:
    loaded = load_ok(bench, mech, 100, body=3)
    try:
        s = bench.run(loaded)
        assert s.sum == 3 * 100 * 99 // 2 == loaded.lp.expected_sum()
    finally:
        loaded.close()


@pytest.mark.requires_bpf
@pytest.mark.parametrize("mech", ["bpf_loop", "iter_num"])
def test_over_2_pow_23_is_e2big_not_a_sum(bench: LoopBench, mech: str) -> None:
    over = load_ok(bench, mech, BPF_MAX_LOOPS + 1)
    at_cap = load_ok(bench, mech, BPF_MAX_LOOPS)
    try:
        s = bench.run(over)
        assert s.status == -errno.E2BIG and s.sum == 0 and s.iterations == 0
        v = verdict(over.lp, s)
        assert (v.ok, v.complete, v.text) == (True, False, "E2BIG: over 8388608 iterations")
        s = bench.run(at_cap)  # exactly 2^23 still runs to completion
        assert verdict(at_cap.lp, s).text == "ok" and s.sum == BPF_MAX_LOOPS * (BPF_MAX_LOOPS - 1) // 2
    finally:
        over.close()
        at_cap.close()


@pytest.mark.requires_bpf
def test_constant_bound_too_large_for_the_verifier_is_a_clear_rejection(bench: LoopBench) -> None:
    r = bench.load(generate("plain", 200_000))
    assert isinstance(r, Rejected)
    assert r.errno == errno.E2BIG
    assert r.status == "rejected: BPF program is too large"
    assert r.processed_insns == 1_000_001


@pytest.mark.requires_bpf
def test_constant_bound_is_walked_unknown_bound_is_not(bench: LoopBench) -> None:
    costs = {}
    for mech in ("plain", "may_goto_const", "may_goto_unknown", "bpf_loop", "iter_num"):
        small, big = load_ok(bench, mech, 10), load_ok(bench, mech, 5_000)
        costs[mech] = (small.processed_insns, big.processed_insns)
        small.close()
        big.close()
    for mech in ("plain", "may_goto_const"):  # the verifier walks every iteration of a constant bound
        assert costs[mech][1] > 100 * costs[mech][0], costs
    for mech in ("may_goto_unknown", "bpf_loop", "iter_num"):  # verified once, whatever n is
        assert costs[mech][0] == costs[mech][1], costs


@pytest.mark.requires_bpf
def test_dispatcher_region_is_verified_once(bench: LoopBench) -> None:
    """A bigger region body adds its own size to the verifier's work once, not once per iteration."""
    one, many = load_ok(bench, "dispatcher", 100, body=1), load_ok(bench, "dispatcher", 100, body=16)
    try:
        assert many.processed_insns - one.processed_insns < 100
    finally:
        one.close()
        many.close()


@pytest.mark.requires_bpf
def test_dispatcher_continues_from_the_host(bench: LoopBench) -> None:
    loaded = load_ok(bench, "dispatcher", 10, budget=4)
    try:
        s = bench.run(loaded, repeat=5)  # repeats are dropped: invocations continue each other
        assert (s.sum, s.iterations, s.invocations) == (45, 10, 3)
        assert verdict(loaded.lp, s).text == "ok (3 invocations)"
    finally:
        loaded.close()


@pytest.mark.requires_bpf
def test_may_goto_cut_reports_the_iterations_done(bench: LoopBench) -> None:
    loaded = load_ok(bench, "may_goto_unknown", 1 << 30)  # ~0.5 s of work; may_goto cuts it earlier
    try:
        s = bench.run(loaded)
        assert s.status == STATUS_CUT and 0 < s.iterations < 1 << 30
        assert s.sum == s.iterations * (s.iterations - 1) // 2
        assert verdict(loaded.lp, s).text == f"cut by may_goto after {s.iterations} iterations"
    finally:
        loaded.close()


@pytest.mark.requires_bpf
def test_bpf_loop_callback_needs_btf_func_info(bench: LoopBench) -> None:
    lp = generate("bpf_loop", 5)
    insns = resolve_refs(ProgramSpec("x", "xdp", ProgType.XDP, lp.insns), {"out": bench.out})
    with pytest.raises(VerifierError) as exc:
        Program.load(ProgType.XDP, insns)
    assert "missing btf func_info" in exc.value.log


def test_verdict_never_passes_a_wrong_sum() -> None:
    lp = generate("plain", 10)
    good = RunSample(1.0, 1.0, 45, 0, 10)
    assert verdict(lp, good).ok
    v = verdict(lp, replace(good, sum=44))
    assert not v.ok and v.text.startswith("WRONG SUM")
    v = verdict(lp, replace(good, iterations=9, sum=36))
    assert not v.ok and v.text.startswith("WRONG COUNT")
    v = verdict(lp, replace(good, status=-errno.EINVAL, sum=0))
    assert not v.ok and "EINVAL" in v.text


@pytest.mark.requires_bpf
def test_run_loops_report() -> None:
    report = run_loops(50, 2, repeat=2)
    keys = [r.key for r in report.results]
    assert keys == [m.key for m in MECHANISMS]
    assert all(r.available for r in report.results)
    for r in report.results:
        assert r.ok and len(r.testrun_ns) == 2, r
        assert r.processed_insns and r.load_ms is not None
        assert r.ratio_to_plain is not None
        if r.key in WASM_ROWS:  # timed with bpf_stats: no in-program clock
            assert r.timing == "bpf_stats" and not r.ktime_ns and r.compile_ms is not None, r
        else:
            assert r.timing == "test_run" and r.status == "ok" and len(r.ktime_ns) == 2, r
    assert report.result("wasm_may_goto").status == "ok"
    assert report.result("wasm_dispatcher").status == "ok (51 transitions)"
    assert report.result("plain").ratio_to_plain == 1.0
    assert report.result("bpf_loop").published_ns == 5.0
    json.dumps(report.to_json())


@pytest.mark.requires_bpf
def test_run_loops_reports_the_rejection_for_a_large_constant_bound() -> None:
    report = run_loops(300_000, 1, mechanisms=["plain", "may_goto_unknown"])
    plain, mg = report.result("plain"), report.result("may_goto_unknown")
    assert plain.status == "rejected: BPF program is too large" and not plain.testrun_ns
    assert mg.status == "ok" and mg.ratio_to_plain is None


def _parser() -> argparse.ArgumentParser:
    """``capsule``'s own parser when ``bench`` is wired into it, else a parser with just ``bench loops``."""
    try:
        from capsule.cli import build_parser

        p = build_parser()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        if "bench" in sub.choices:
            return p
    except ImportError:
        pass
    p = argparse.ArgumentParser(prog="capsule")
    add_parsers(p.add_subparsers(dest="command", required=True))
    return p


@pytest.mark.requires_bpf
def test_cli_table_json_and_plot(tmp_path, capsys) -> None:
    args = _parser().parse_args(["bench", "loops", "--n", "20", "--rounds", "2", "--plot", str(tmp_path / "l.png")])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    for m in MECHANISMS:
        assert m.title in text, m.title
    assert "published" in text and "* timed differently" in text and "not available" not in text
    assert "ok (21 transitions)" in text  # the dispatcher profile: one transition per back-edge, one to enter
    assert (tmp_path / "l.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    args = _parser().parse_args(["bench", "loops", "--n", "20", "--rounds", "1", "--json"])
    assert args.func(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["key"] for m in data["mechanisms"]] == [m.key for m in MECHANISMS]
    assert data["settings"]["program_type"] == "XDP"
    assert data["published"]["ns_per_iteration"] == {"plain": 2.0, "bpf_loop": 5.0}


@pytest.mark.requires_bpf
def test_scaling_small(tmp_path) -> None:
    sc = run_scaling(ns=(10, 2_000), bodies=(1, 2), body_n=100)
    assert set(sc["vs_n"]) == set(RUNNABLE) == set(sc["limits"])
    for mech, points in sc["vs_n"].items():
        assert [p["n"] for p in points] == [10, 2_000]
        assert all(p["status"].startswith("ok") and p["complete"] for p in points), (mech, points)
        assert sc["limits"][mech] == "complete at every n up to 2,000"
    for points in sc["vs_body"].values():
        assert [p["body"] for p in points] == [1, 2] and all(p["ok"] for p in points)
    plot_scaling(sc, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000


# -- the loop as capsule compiles it from wasm -------------------------------------------------------------
@pytest.mark.requires_bpf
@pytest.mark.parametrize("key", WASM_ROWS)
def test_wasm_loop_sums_correctly(key: str) -> None:
    with WasmLoop(key) as wl:
        assert wl.processed_insns > 0 and wl.load_ms > 0 and wl.xlated_insns > 0
        for n in (0, 1, 7, 10_000, 100_000):
            r = wl.run(n, repeat=2)
            assert r.sum == n * (n - 1) // 2 == expected_sum(n), (key, n)
            assert r.ok and r.invocations == 1 and r.run_time_ns > 0
            # may_goto keeps the loop inside its region; without it every back-edge goes through the dispatcher
            assert r.transitions == (1 if key == "wasm_may_goto" else n + 1), (key, n, r)
        mem = wl.instance.memory()
        assert int.from_bytes(mem[8:16], "little") == 100_000 * 99_999 // 2  # the accumulator lives in memory


@pytest.mark.requires_bpf
def test_wasm_loop_dispatcher_profile_continues_from_the_host() -> None:
    """A budget of transitions per invocation: the call goes PENDING and the host continues it."""
    with WasmLoop("wasm_dispatcher") as wl:
        r = wl.run(1000, budget=100)
        # the budget is checked between batches of regions, so an invocation may overshoot it a little
        assert r.sum == 499_500 and r.transitions == 1001 and 1001 // 200 <= r.invocations <= 11
        assert r.text == f"ok ({r.invocations} invocations, 1,001 transitions)"


@pytest.mark.requires_bpf
def test_wasm_loop_verification_cost_does_not_grow_with_a_constant_bound() -> None:
    """The compiler keeps loop bounds unknown to the verifier: the counter is a local in the frame (arena
    memory), so even a constant bound is verified once, unlike the plain loop's (see the test above)."""
    for key in WASM_ROWS:
        costs = []
        for bound in (10, 1_000_000):
            with WasmLoop(key, bound=bound) as wl:
                costs.append(wl.processed_insns)
                assert wl.run(0).sum == expected_sum(bound)  # the argument is ignored: the bound is constant
        assert costs[0] == costs[1], (key, costs)
        assert costs[0] < 100_000, (key, costs)


def test_wasm_module_is_the_seed_workload() -> None:
    wasm = module_bytes()
    assert wasm[:4] == b"\0asm"
    assert module_bytes(5) != wasm  # the constant-bound variant is a different module
    with pytest.raises(ValueError):
        WasmLoop("wasm")
    with pytest.raises(ValueError, match="compiled from wasm"):
        generate("wasm_may_goto", 10)
