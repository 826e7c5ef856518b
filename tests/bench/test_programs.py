"""``capsule bench programs`` on small inputs: rows measure, agree or say why not, missing recipes are rows, the
table, the JSON and the plot are made. No timing is asserted (timings depend on the machine)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from capsule.bench import programs, workloads
from capsule.bench.programs import cold_cache, measure_integer, measure_workload, run_programs
from capsule.bench.programs_report import plot_rows, render_table
from capsule.bench.wasi_runs import Invocation, Output
from capsule.bench.workloads import Builds, Missing, Workload, native_cached
from capsule.cli.bench import add_parsers
from capsule.toolchain.cache import cache_dir
from capsule.toolchain.guest import build_wasm
from tests.fds import bpf_fd_count


def _hello(tmp: Path, text: str) -> Path:
    src = tmp / f"hello-{abs(hash(text))}.c"
    src.write_text(f'#include <stdio.h>\nint main(void) {{ puts("{text}"); return 0; }}\n')
    return src


@pytest.mark.requires_bpf
def test_an_integer_kernel_row_has_every_figure() -> None:
    before = bpf_fd_count()
    row = measure_integer("fib", reps=2, cold=False, n=18)
    assert row.status == "ok" and row.counts, row.note
    assert len(row.native_ms) == len(row.wasmtime_ms) == len(row.kernel_ms) == len(row.kernel_wall_ms) == 2
    assert row.figures is not None and row.figures.programs[0].processed > 0 and row.figures.jited_bytes > 0
    assert row.transitions and row.transitions > 1000  # fib(18) makes 8361 calls
    assert row.build_warm_s is not None and row.build_cold_s is None
    assert bpf_fd_count() == before


@pytest.mark.requires_bpf
def test_the_demo_row_agrees_with_native() -> None:
    (demo,) = workloads.by_name(["demo"])
    row = measure_workload(demo, reps=1, cold=False, progress=lambda msg: None)
    assert row.status == "ok" and row.kernel_agrees and row.wasmtime_agrees, row.note
    assert row.counts and row.kernel_ms[0] > 0 and row.native_ms[0] > 0
    assert row.figures is not None and row.figures.bpf_insns > 10_000
    assert "| demo |" in render_table([row])


@pytest.mark.requires_bpf
def test_a_kernel_output_unlike_native_does_not_count(tmp_path: Path) -> None:
    native, guest = _hello(tmp_path, "native says this"), _hello(tmp_path, "the guest says that")
    w = Workload("liar", "prints something else in the kernel", "liar",
                 lambda: Builds(lambda: native_cached("liar", [native], ["-O2"]), lambda: build_wasm([guest]).wasm),
                 lambda _: Invocation(("liar",)))
    row = measure_workload(w, reps=1, cold=False, progress=lambda msg: None)
    assert row.status == "ok" and row.kernel_agrees is False and row.wasmtime_agrees is False
    assert not row.counts and row.meets_target is None
    assert "the kernel's stdout differs from native" in row.note
    table = render_table([row])
    assert "NO: the kernel's stdout differs" in table and "| (" in table  # the ratio is shown, in parentheses


def test_a_missing_recipe_is_a_row_that_says_so() -> None:
    def prepare() -> Builds:
        workloads._recipe("no_such_program")
        raise AssertionError("unreachable: the recipe does not exist")

    w = Workload("nothing", "a program nobody has packaged", "nothing", prepare, lambda _: Invocation(("x",)))
    row = measure_workload(w, 1, False, lambda m: None)
    assert row.status == "missing" and row.note == "no recipe: capsule.sources.no_such_program is not in this checkout"
    assert "| nothing | no recipe: capsule.sources.no_such_program" in render_table([row])


def test_a_failing_build_is_a_failed_row(tmp_path: Path) -> None:
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return nope; }\n")
    w = Workload("bad", "does not compile", "bad",
                 lambda: Builds(lambda: native_cached("bad", [bad], []), lambda: build_wasm([bad]).wasm),
                 lambda _: Invocation(("bad",)))
    row = measure_workload(w, 1, False, lambda m: None)
    assert row.status == "failed" and "ToolchainError" in row.note and "nope" in row.note
    assert "FAILED" in render_table([row])


def test_scales_give_the_time_per_unit() -> None:
    w = Workload("d", "", "d", lambda: Builds(Path, Path), lambda s: Invocation(("d",)), scales=(10, 60), unit="frame")
    assert programs._per_unit(w, {10: [100.0, 120.0], 60: [350.0, 320.0]}) == [5.0, 4.0]


def test_cold_cache_moves_the_build_caches_and_keeps_the_sources() -> None:
    src, build = cache_dir("src"), cache_dir("build")
    before = os.environ.get("CAPSULE_CACHE")
    with cold_cache():
        assert cache_dir("build") != build
        assert cache_dir("src").resolve() == src.resolve()
    assert os.environ.get("CAPSULE_CACHE") == before and cache_dir("build") == build


def test_only_selects_rows_and_groups() -> None:
    assert [w.name for w in workloads.by_name(["zlib"])] == ["zlib-example", "zlib-round-trip"]
    assert [w.name for w in workloads.by_name(["lua", "demo"])] == ["demo", "lua"]
    with pytest.raises(ValueError, match="no program is called nope"):
        run_programs(["nope"])


def test_every_article_figure_has_a_row() -> None:
    groups = {w.group for w in workloads.WORKLOADS}
    assert set(workloads.ARTICLE) <= groups
    assert workloads.ARTICLE == {"lua": 7.5, "sqlite": 6.6, "quickjs": 9.2, "doom": 3.5, "cpython": 15.6}


@pytest.mark.requires_bpf
def test_command_line_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    no_kernel_fd_leak: None) -> None:
    p = argparse.ArgumentParser()
    add_parsers(p.add_subparsers(dest="command"))
    png = tmp_path / "programs.png"
    args = p.parse_args(["bench", "programs", "--only", "matmul", "--only", "sieve",
                         "--reps", "1", "--no-cold", "--json", "--plot", str(png)])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in out["results"]] == ["sieve", "matmul"]
    assert all(r["counts"] and r["figures"]["processed"] > 0 for r in out["results"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_line_refuses_an_unknown_program(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    add_parsers(p.add_subparsers(dest="command"))
    args = p.parse_args(["bench", "programs", "--only", "nope"])
    with pytest.raises(SystemExit, match="no program 'nope'"):
        args.func(args)


def test_plot_of_rows_without_times_is_empty_but_written(tmp_path: Path, no_kernel_fd_leak: None) -> None:
    row = programs.Row("x", "nothing measured", status="missing", note="no recipe")
    plot_rows([row], tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_missing_is_what_a_missing_workload_file_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(workloads, "REPO", tmp_path)
    with pytest.raises(Missing, match="is not in this checkout"):
        workloads._needs(tmp_path / "tests" / "gone.lua")


def test_only_what_ilp32_and_lp64_builds_may_print_differently_is_dropped() -> None:
    """DOOM's zone address and zlib's compile flags differ between the builds; a different figure beside them
    must still count as a difference."""
    (doom,) = workloads.by_name(["doom"])
    a = Output(b"zone memory: 0x7f99a821d010, 600000 allocated for zone\n", b"", 0)
    b = Output(b"zone memory: 0x1bcf570, 600000 allocated for zone\n", b"", 0)
    assert doom.normalize(a) == doom.normalize(b)
    assert doom.normalize(a) != doom.normalize(Output(b"zone memory: 0x1bcf570, 500000 allocated for zone\n",
                                                        b"", 0))
    ex = workloads.by_name(["zlib-example"])[0]
    assert ex.normalize(Output(b"compile flags = 0xa9\nok\n", b"", 0)).stdout == b"ok\n"
