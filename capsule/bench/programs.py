"""``capsule bench programs``: one table of every real program capsule runs, natively, under wasmtime and in
the kernel, with what the verifier and the build cost.

Rows: the integer kernels (``capsule.bench.integers``), then the programs of ``capsule.bench.workloads`` (the
demo, zlib, Lua, and SQLite, QuickJS, DOOM, wasm3 and CPython when their recipes are in the checkout; a missing
one is a row saying so). Each row gives

* times, the best of ``--reps`` runs, and their ratios to native: native gcc -O2 (the process's CPU time: the
  integer kernels time each call in-process, the programs are children timed by ``wait4``), wasmtime (the
  calling thread's CPU time) and the kernel's BPF run time (``Instance.run_time_ns``: all of the object's
  programs, bpf_stats on), with the kernel's wall time beside it. CPU clocks keep a machine shared with other
  jobs from inflating one side of a ratio;
* the verifier: BPF instructions and processed instructions per program (``capsule.bench.figures``), the number
  of programs, the load time;
* the build: C to wasm plus wasm to BPF, cold (fresh build caches, fetched sources reused) and warm (again);
* issue 13's target and the BPF Capsule article's ratio where it has one.

A row counts only when the kernel's output equals the native one (after ``Workload.normalize``); the table says
so when it does not. DOOM's row is per frame: the difference of two runs of different lengths.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from capsule.bpf.spec import ObjectSpec
from capsule.compiler import compile_module
from capsule.toolchain.cache import cache_dir
from capsule.wasm import load

from . import integers
from .figures import object_figures
from .program_rows import Row
from .wasi_runs import Output, run_kernel, run_native, run_wasmtime
from .workloads import TARGET, WORKLOADS, Missing, Workload, by_name

DEFAULT_REPS = 3
Progress = Callable[[str], None]


def _first_line(e: BaseException) -> str:
    """One line for the table: the error's first line, and the compiler's first ``error:`` line after it."""
    text = [t.strip() for t in str(e).strip().splitlines()]
    first = text[0] if text else ""
    cause = next((t for t in text[1:] if "error" in t), "")
    return f"{type(e).__name__}: {first}{' ' + cause if cause else ''}"[:300]


# -- builds -----------------------------------------------------------------------------------------------------
@contextmanager
def cold_cache() -> Iterator[None]:
    """Every build cache of capsule empty for the duration (a fresh ``CAPSULE_CACHE``), fetched sources kept:
    ``src`` links to the real one, so a cold build compiles everything and downloads nothing."""
    src = cache_dir("src")
    src.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("CAPSULE_CACHE")
    with tempfile.TemporaryDirectory(prefix="capsule-cold-") as tmp:
        os.symlink(src, Path(tmp) / "src")
        os.environ["CAPSULE_CACHE"] = tmp
        try:
            yield
        finally:
            if old is None:
                del os.environ["CAPSULE_CACHE"]
            else:
                os.environ["CAPSULE_CACHE"] = old


def _compile(wasm: bytes) -> ObjectSpec:
    return compile_module(load(wasm))


def build_both(row: Row, make_wasm: Callable[[], bytes], cold: bool) -> tuple[bytes, ObjectSpec]:
    """Build to wasm and compile to BPF, timing a cold build (``cold``) and a warm one; the module and object."""
    if cold:
        with cold_cache():
            t0 = time.perf_counter()
            _compile(make_wasm())
            row.build_cold_s = time.perf_counter() - t0
            wasm, spec, warm = _timed_build(make_wasm)
    else:
        make_wasm()  # fill the cache, so that what follows is a warm build
        wasm, spec, warm = _timed_build(make_wasm)
    row.build_warm_s, row.compile_s = warm
    row.wasm_bytes = len(wasm)
    return wasm, spec


def _timed_build(make_wasm: Callable[[], bytes]) -> tuple[bytes, ObjectSpec, tuple[float, float]]:
    t0 = time.perf_counter()
    wasm = make_wasm()
    t1 = time.perf_counter()
    spec = _compile(wasm)
    t2 = time.perf_counter()
    return wasm, spec, (t2 - t0, t2 - t1)


# -- the integer kernels ----------------------------------------------------------------------------------------
def measure_integer(name: str, reps: int, cold: bool, n: int | None = None) -> Row:
    """A kernel of ``capsule.bench.integers``: ``run(n)`` natively, under wasmtime and in the kernel."""
    from capsule.kernel.prog import bpf_stats
    from capsule.runtime import Instance

    default, what = integers.KERNELS[name]
    n = default if n is None else n
    row = Row(name, f"{what}, n = {n:,}", target=TARGET["integers"])
    try:
        native, times = integers.run_native(name, n, reps, time.CLOCK_PROCESS_CPUTIME_ID)
        row.native_ms = [t / 1e6 for t in times]
        wasm = integers.build_wasm(name)
        ref, times = integers.run_wasmtime(wasm, n, reps, time.thread_time_ns)
        row.wasmtime_ms = [t / 1e6 for t in times]
        row.wasmtime_agrees = ref == native
        _, spec = build_both(row, lambda: integers.build_wasm(name), cold)
        with Instance(spec) as inst:
            row.figures = object_figures(spec, inst)
            (got,) = inst.call("run", n)
            row.kernel_agrees = got == native
            with bpf_stats():
                for _ in range(reps):
                    bpf0, tr0, t0 = inst.run_time_ns(), inst.stats.transitions, time.perf_counter_ns()
                    inst.call("run", n)
                    row.kernel_wall_ms.append((time.perf_counter_ns() - t0) / 1e6)
                    row.kernel_ms.append((inst.run_time_ns() - bpf0) / 1e6)
                    row.transitions = inst.stats.transitions - tr0
        if not row.kernel_agrees:
            row.note = f"the kernel returned {got}, native {native}"
    except Exception as e:  # noqa: BLE001 - any failure is this row's, and the table goes on
        row.status, row.note = "failed", _first_line(e)
    return row


# -- the programs -----------------------------------------------------------------------------------------------
def _differs(a: Output, b: Output) -> str:
    """Empty when the outputs agree, else what differs first."""
    for what in ("code", "stdout", "stderr"):
        if getattr(a, what) != getattr(b, what):
            return what
    if a.files != b.files:
        return f"files ({', '.join(sorted(set(a.files) ^ set(b.files))) or 'contents'})"
    return ""


def _per_unit(w: Workload, times: dict[int, list[float]]) -> list[float]:
    """One figure per repetition: the run's time, or the difference of the two scales' runs per unit."""
    if len(w.scales) == 1:
        return times[w.scales[0]]
    (a, ta), (b, tb) = sorted(times.items())
    return [(y - x) / (b - a) for x, y in zip(ta, tb, strict=False)]


def measure_workload(w: Workload, reps: int, cold: bool, progress: Progress) -> Row:
    row = Row(w.name, w.what, w.unit, article=w.article, target=w.target)
    try:
        builds = w.prepare()
        progress(f"{w.name}: native build")
        exe = builds.native()
        invs = {s: w.invocation(s) for s in w.scales}
    except Missing as e:
        row.status, row.note = "missing", str(e)
        return row
    except Exception as e:  # noqa: BLE001 - a fetch or build error is this row's
        row.status, row.note = "failed", _first_line(e)
        return row
    native: dict[int, Output] = {}
    times: dict[str, dict[int, list[float]]] = {"native": {}, "wasmtime": {}, "kernel": {}, "wall": {}}
    notes: list[str] = []
    try:
        for s, inv in invs.items():
            runs = [run_native(exe, inv) for _ in range(reps)]
            native[s] = w.normalize(runs[0][0])
            times["native"][s] = [cpu * 1e3 for _, cpu, _ in runs]
        progress(f"{w.name}: capsule build{' (cold, then warm)' if cold else ''}")
        module, spec = build_both(row, lambda: Path(builds.wasm()).read_bytes(), cold)
        progress(f"{w.name}: wasmtime")
        row.wasmtime_agrees = True
        for s, inv in invs.items():
            runs_w = [run_wasmtime(module, inv) for _ in range(reps)]
            row.wasmtime_agrees &= not _differs(native[s], w.normalize(runs_w[0][0]))
            times["wasmtime"][s] = [t * 1e3 for _, t in runs_w]
        row.kernel_agrees = True
        for s, inv in invs.items():
            for k in range(reps):
                progress(f"{w.name}: kernel run {k + 1}/{reps}" + (f" ({s} {w.unit}s)" if len(invs) > 1 else ""))
                run = run_kernel(spec, inv)
                row.figures = run.figures
                row.transitions = run.transitions
                times["kernel"].setdefault(s, []).append(run.bpf_ns / 1e6)
                times["wall"].setdefault(s, []).append(run.wall_ns / 1e6)
                diff = _differs(native[s], w.normalize(run.output))
                if diff:
                    row.kernel_agrees = False
                    notes.append(f"the kernel's {diff} differs from native")
    except Exception as e:  # noqa: BLE001 - a compile, load or run failure is this row's
        row.status = "failed"
        notes.append(_first_line(e))
    row.native_ms = _per_unit(w, times["native"]) if len(times["native"]) == len(w.scales) else []
    row.wasmtime_ms = _per_unit(w, times["wasmtime"]) if len(times["wasmtime"]) == len(w.scales) else []
    if len(times["kernel"]) == len(w.scales):
        row.kernel_ms, row.kernel_wall_ms = _per_unit(w, times["kernel"]), _per_unit(w, times["wall"])
    if row.wasmtime_agrees is False:
        notes.append("wasmtime's output differs from native")
    row.note = "; ".join(dict.fromkeys(notes))
    return row


def run_programs(names: list[str] | None = None, reps: int = DEFAULT_REPS, cold: bool = True,
                 progress: Progress | None = None, sizes: dict[str, int] | None = None) -> list[Row]:
    """Measure the rows ``names`` select (all by default), in table order."""
    names = names or []
    say = progress or (lambda msg: None)
    kernels = [k for k in integers.KERNELS if not names or k in names or "integers" in names]
    works = by_name(names) if names else list(WORKLOADS)
    if names and not works and not kernels:
        raise ValueError(f"no program is called {', '.join(names)}")
    total, rows = len(kernels) + len(works), list[Row]()
    for name in kernels:
        say(f"[{len(rows) + 1}/{total}] {name}")
        rows.append(measure_integer(name, reps, cold, (sizes or {}).get(name)))
    for w in works:
        say(f"[{len(rows) + 1}/{total}] {w.name}")
        rows.append(measure_workload(w, reps, cold, lambda msg: say(f"[{len(rows) + 1}/{total}] {msg}")))
    return rows


def choices() -> list[str]:
    """What ``--only`` accepts: every row's name and every group's."""
    return sorted({*integers.KERNELS, "integers", *(w.name for w in WORKLOADS), *(w.group for w in WORKLOADS)})


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                "unknown CPU")


# -- command line -----------------------------------------------------------------------------------------------
def add_parser(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``bench programs`` in the ``bench`` group (``capsule.cli.bench``)."""
    p = bench.add_parser(
        "programs", help="every real program natively, under wasmtime and in the kernel: one table",
        description="Build every real program capsule runs (integer kernels, the demo, zlib, Lua, and SQLite, "
                    "QuickJS, DOOM, wasm3 when their recipes exist) natively with gcc -O2 and with capsule, run "
                    "them natively, under wasmtime and in the kernel, check the outputs agree, and print times, "
                    "ratios, the verifier's figures, load and build times beside issue 13's targets and the BPF "
                    "Capsule article's ratios.")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help=f"only this program or group (repeatable): {', '.join(choices())}")
    p.add_argument("--reps", type=int, default=DEFAULT_REPS,
                   help=f"timed runs per program and engine (default {DEFAULT_REPS}; each kernel run of a program "
                        "loads it afresh)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold build (it compiles everything twice)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--save", metavar="JSON", help="also write the results as JSON to this file")
    p.add_argument("--plot", metavar="PNG", help="also write a bar chart of the ratios to native")
    p.set_defaults(func=cmd_programs)
    return p


def cmd_programs(args: argparse.Namespace) -> int:
    from .programs_report import plot_rows, render_table

    unknown = sorted(set(args.only) - set(choices()))
    if unknown:
        raise SystemExit(f"capsule bench programs: no program {unknown[0]!r} (choose from {', '.join(choices())})")
    if args.reps < 1:
        raise SystemExit("capsule bench programs: --reps must be at least 1")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    load_before, t0 = os.getloadavg(), time.time()
    try:
        rows = run_programs(args.only, args.reps, not args.no_cold, say)
    except KeyboardInterrupt:
        traceback.print_exc(limit=0)
        return 130
    machine = {**integers.machine(), "cpu": _cpu_model(), "load_average_before": load_before,
               "load_average_after": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M %Z", time.gmtime(t0)),
               "minutes": round((time.time() - t0) / 60, 1)}
    report = json.dumps({"machine": machine, "reps": args.reps, "results": [r.to_json() for r in rows]}, indent=2)
    if args.save:
        Path(args.save).write_text(report + "\n")
    if args.json:
        print(report)
    else:
        print(f"every program, best of {args.reps}, {machine['cpu']}, {machine['kernel']} {machine['arch']}, "
              f"{machine['cpus']} CPUs, load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
        print(render_table(rows))
    if args.plot:
        plot_rows(rows, Path(args.plot))
    return 0 if all(r.status != "failed" and r.kernel_agrees is not False for r in rows) else 1

