"""``capsule bench loops``: what one loop iteration costs under each loop mechanism the kernel offers.

For each mechanism of ``loop_programs.MECHANISMS`` two programs are loaded: one with ``n`` iterations and one
with none (the *empty-loop baseline*: same code, same helper calls, zero iterations). Each round runs both with
BPF_PROG_TEST_RUN and takes, for both timing methods (the test run's duration and the program's own
``bpf_ktime_get_ns`` around the loop),

    ns per iteration = (time with n iterations - time with 0 iterations) / n

so the program's entry, the clock reads, ``bpf_iter_num_new``/``destroy`` and the call of ``bpf_loop`` itself
cancel out and what is left is the per-iteration cost. Rounds interleave the mechanisms so that a noisy moment
of the machine hits all of them; the table reports the minimum and the median over rounds.

The two wasm rows are the same workload compiled by capsule (``wasm_loop``), once per kernel profile. Their calls
go through ``Instance.call``, which may take several test runs of the entry program (a budget spent is continued,
the host serves the guest between runs), so they are timed differently: ``bpf_stats`` ``run_time_ns`` over a batch
of calls ``sum(n)``, minus a batch of ``sum(0)``, divided by ``n``. They have no ``bpf_ktime_get_ns`` figure (the
compiled program does not read the clock).

``--scaling`` adds verification cost and run time against ``n`` and against the loop body's size, and finds
where each mechanism stops (``loop_scaling``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .loop_programs import DISPATCH_BUDGET, MECHANISMS, Mechanism, generate
from .loop_runner import Loaded, LoopBench, Rejected, RunSample, repeat_for, safe_load, verdict
from .wasm_loop import WasmLoop

DEFAULT_N = 10_000  # the seed's loop length
DEFAULT_ROUNDS = 25

# The seed's figures: kprobe on __arm64_sys_getpid, Linux 6.9, arm64 VM, bpf_ktime_get_ns around 10k iterations,
# no baseline subtracted.
PUBLISHED = {"plain": 2.0, "bpf_loop": 5.0}
PUBLISHED_SOURCE = "bpf-loop-benchmark (Linux 6.9, arm64 VM, kprobe, bpf_ktime_get_ns, 10k iterations)"

Progress = Callable[[str], None]


@dataclass
class MechanismResult:
    """One row of the table: a mechanism's verdict, verification cost and per-iteration times."""

    key: str
    title: str
    available: bool
    status: str
    ok: bool
    n: int
    processed_insns: int | None = None
    verify_us: int | None = None
    load_ms: float | None = None
    xlated_insns: int | None = None
    jited_bytes: int | None = None
    invocations: int = 1
    transitions: int | None = None  # wasm rows: dispatcher transitions per call
    timing: str = "test_run"  # "test_run" (with ktime), or "bpf_stats" (the wasm rows: run_time_ns, no ktime)
    compile_ms: float | None = None  # wasm rows: capsule's compile time (Python), before load_ms
    testrun_ns: list[float] = field(default_factory=list)  # ns per iteration, one per round
    ktime_ns: list[float] = field(default_factory=list)
    published_ns: float | None = None
    ratio_to_plain: float | None = None  # median test-run ns/iteration over the plain loop's

    @staticmethod
    def _stat(xs: list[float], f: Callable[[list[float]], float]) -> float | None:
        return f(xs) if xs else None

    @property
    def testrun_min(self) -> float | None:
        return self._stat(self.testrun_ns, min)

    @property
    def testrun_median(self) -> float | None:
        return self._stat(self.testrun_ns, statistics.median)

    @property
    def ktime_min(self) -> float | None:
        return self._stat(self.ktime_ns, min)

    @property
    def ktime_median(self) -> float | None:
        return self._stat(self.ktime_ns, statistics.median)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(testrun_min=self.testrun_min, testrun_median=self.testrun_median, ktime_min=self.ktime_min,
                 ktime_median=self.ktime_median)
        return d


@dataclass
class LoopsReport:
    n: int
    rounds: int
    repeat: int
    body: int
    results: list[MechanismResult]
    machine: dict[str, str]
    scaling: dict[str, Any] | None = None

    def result(self, key: str) -> MechanismResult:
        return next(r for r in self.results if r.key == key)

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": "loops",
            "settings": {"n": self.n, "rounds": self.rounds, "repeat": self.repeat, "body": self.body,
                         "program_type": "XDP", "dispatch_budget": DISPATCH_BUDGET,
                         "ns_per_iteration": "(time(n) - time(0)) / n, both timings",
                         "wasm_rows": "Instance.call (one or more test runs); bpf_stats run_time_ns per call, "
                                      "(time(n) - time(0)) / n; no ktime"},
            "machine": self.machine,
            "published": {"source": PUBLISHED_SOURCE, "ns_per_iteration": PUBLISHED},
            "mechanisms": [r.to_json() for r in self.results],
            "scaling": self.scaling,
        }


def machine_info() -> dict[str, str]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kernel": platform.release(), "arch": platform.machine(), "cpu": cpu}


def _placeholder(m: Mechanism, n: int) -> MechanismResult:
    return MechanismResult(m.key, m.title, False, m.note, True, n, published_ns=PUBLISHED.get(m.key))


def _per_iteration(full: RunSample, empty: RunSample, n: int) -> tuple[float, float]:
    return (full.duration_ns - empty.duration_ns) / n, (full.ktime_ns - empty.ktime_ns) / n


def _load_wasm(row: MechanismResult) -> WasmLoop | None:
    """Compile and load one wasm profile; a failure becomes the row's status (and a non-zero exit)."""
    try:
        wl = WasmLoop(row.key)
    except Exception as e:  # noqa: BLE001 - a missing wat2wasm, a compile error or a rejection is a row status
        row.status = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return None
    row.processed_insns, row.verify_us, row.load_ms = wl.processed_insns, wl.verify_us, wl.load_ms
    row.xlated_insns, row.jited_bytes, row.compile_ms = wl.xlated_insns, wl.jited_bytes, wl.compile_ms
    return wl


def _wasm_round(row: MechanismResult, wl: WasmLoop, n: int, repeat: int, first: bool) -> None:
    full, empty = wl.run(n, repeat), wl.run(0, repeat)
    if first or not full.ok:
        row.status, row.ok = full.text, full.ok and empty.ok
        row.invocations, row.transitions = full.invocations, full.transitions
    if full.ok and n > 0:
        row.testrun_ns.append((full.run_time_ns - empty.run_time_ns) / n)


def run_loops(n: int = DEFAULT_N, rounds: int = DEFAULT_ROUNDS, *, body: int = 1, repeat: int | None = None,
              mechanisms: Sequence[str] | None = None, progress: Progress | None = None) -> LoopsReport:
    """Load every mechanism's program (and its empty-loop twin), run ``rounds`` interleaved rounds."""
    if n < 0 or rounds < 1:
        raise ValueError("n must be >= 0 and rounds >= 1")
    say = progress or (lambda _msg: None)
    repeat = repeat or repeat_for(n)
    chosen = [m for m in MECHANISMS if mechanisms is None or m.key in mechanisms]
    results: list[MechanismResult] = []
    live: list[tuple[MechanismResult, Loaded, Loaded]] = []
    wasm: list[tuple[MechanismResult, WasmLoop]] = []
    wasm_repeat = repeat_for(n, 500_000, 100)  # calls per batch: each is a syscall, timed in the kernel only
    with LoopBench() as bench:
        try:
            for m in chosen:
                if not m.available:
                    results.append(_placeholder(m, n))
                    continue
                say(f"loading {m.key}")
                row = MechanismResult(m.key, m.title, True, "", False, n, published_ns=PUBLISHED.get(m.key))
                results.append(row)
                if m.compiled:
                    row.timing = "bpf_stats"
                    wl = _load_wasm(row)
                    if wl is not None:
                        wasm.append((row, wl))
                    continue
                full = safe_load(bench, generate(m.key, n, body))
                if isinstance(full, Rejected):
                    row.status, row.processed_insns, row.load_ms = full.status, full.processed_insns, full.load_ms
                    row.ok = True  # a rejection is a correct, reported outcome
                    continue
                row.processed_insns, row.verify_us, row.load_ms = full.processed_insns, full.verify_us, full.load_ms
                row.xlated_insns, row.jited_bytes = full.xlated_insns, full.jited_bytes
                empty = safe_load(bench, generate(m.key, 0, body))
                if isinstance(empty, Rejected):  # cannot happen for a loop that ran n > 0 times; say so if it does
                    full.close()
                    row.status = f"baseline {empty.status}"
                    continue
                live.append((row, full, empty))
            for rnd in range(rounds):
                say(f"round {rnd + 1}/{rounds}")
                for row, full, empty in live:
                    s_full, s_empty = bench.run(full, repeat), bench.run(empty, repeat)
                    v = verdict(full.lp, s_full)
                    if rnd == 0 or not v.ok:
                        row.status, row.ok, row.invocations = v.text, v.ok, s_full.invocations
                    if v.complete and n > 0:
                        t, k = _per_iteration(s_full, s_empty, n)
                        row.testrun_ns.append(t)
                        row.ktime_ns.append(k)
                for row, wl in wasm:
                    _wasm_round(row, wl, n, wasm_repeat, rnd == 0)
        finally:
            for _, full, empty in live:
                full.close()
                empty.close()
            for _, wl in wasm:
                wl.close()
    plain = next((r for r in results if r.key == "plain"), None)
    base = plain.testrun_median if plain is not None else None
    for r in results:
        if base and r.testrun_median is not None:
            r.ratio_to_plain = r.testrun_median / base
    return LoopsReport(n, rounds, repeat, body, results, machine_info())


# -- presentation ---------------------------------------------------------------------------------------
def _ns(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _ktime(r: MechanismResult, x: float | None) -> str:
    return "n/a" if r.timing == "bpf_stats" else _ns(x)


def _int(x: int | None) -> str:
    return "" if x is None else f"{x:,}"


def render_table(report: LoopsReport, console: Any) -> None:
    """Print the report as a rich table (``console`` is a ``rich.console.Console``)."""
    from rich.table import Table

    m = report.machine
    table = Table(title=f"loop mechanisms: n = {report.n:,}, {report.rounds} rounds x {report.repeat} test runs, "
                        f"XDP, {m.get('kernel', '')} {m.get('arch', '')}")
    cols = ["mechanism", "status", "test_run min", "median", "ktime min", "median", "x plain",
            "processed insns", "verify us", "load ms", "published"]
    for c in cols:
        text = c in ("mechanism", "status")
        table.add_column(c, justify="left" if text else "right", no_wrap=text)
    for r in report.results:
        table.add_row(r.title + (" *" if r.timing == "bpf_stats" else ""), r.status, _ns(r.testrun_min),
                      _ns(r.testrun_median), _ktime(r, r.ktime_min), _ktime(r, r.ktime_median),
                      "" if r.ratio_to_plain is None else f"{r.ratio_to_plain:.2f}",
                      _int(r.processed_insns), _int(r.verify_us),
                      "" if r.load_ms is None else f"{r.load_ms:.1f}", _ns(r.published_ns))
    console.print(table)
    console.print("times are ns per iteration = (time with n iterations - time with 0) / n; "
                  "test_run = BPF_PROG_TEST_RUN duration, "
                  f"ktime = bpf_ktime_get_ns around the loop inside the program. Published: {PUBLISHED_SOURCE}.",
                  highlight=False)
    if any(r.timing == "bpf_stats" for r in report.results):
        console.print("* timed differently: the wasm module compiled by capsule runs through Instance.call, "
                      "which may take several test runs per call; its test_run columns are bpf_stats "
                      "run_time_ns per call (mean of a batch, the call's invocations summed), (time of sum(n) - "
                      "time of sum(0)) / n; no ktime. processed insns and load ms are the whole compiled program's "
                      "(entry, dispatcher, the function).", highlight=False)
    if report.scaling is not None:
        from .loop_scaling import render_scaling

        render_scaling(report.scaling, console)


def plot_report(report: LoopsReport, path: Path) -> None:
    """A bar chart of median ns/iteration per mechanism, both methods, with the published figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report.results if r.testrun_median is not None or r.published_ns is not None]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.8))
    ys = range(len(rows))
    h = 0.27
    ax.barh([y - h for y in ys], [r.testrun_median or 0 for r in rows], h, label="test_run (median)")
    ax.barh(list(ys), [r.ktime_median or 0 for r in rows], h, label="bpf_ktime_get_ns (median)")
    ax.barh([y + h for y in ys], [r.published_ns or 0 for r in rows], h, label="published (6.9 arm64)")
    ax.set_yticks(list(ys), [r.title + (" *" if r.timing == "bpf_stats" else "") for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ns per iteration")
    ax.set_title(f"BPF loop mechanisms, n = {report.n:,} ({report.machine.get('kernel', '')})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8)
    if any(r.timing == "bpf_stats" for r in rows):
        fig.text(0.01, 0.005, "* SYSCALL program timed with bpf_stats run_time_ns (first bar); no ktime", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line -----------------------------------------------------------------------------------------
def add_parser(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``bench loops`` in the ``bench`` group (``capsule.cli.bench``)."""
    p = bench.add_parser(
        "loops", help="ns per iteration of each BPF loop mechanism, verifier cost, limits",
        description="Sum 0..n-1 through a volatile accumulator with each BPF loop mechanism (plain bounded loop, "
                    "bpf_loop, bpf_iter_num, may_goto with a known and an unknown bound, a dispatcher calling a "
                    "global region, the same loop compiled by capsule from wasm with may_goto and with "
                    "dispatcher back-edges) and report ns per iteration (BPF_PROG_TEST_RUN and bpf_ktime_get_ns, empty-"
                    "loop baseline subtracted), verifier cost, and the published figures.")
    p.add_argument("--n", type=int, default=DEFAULT_N, help=f"loop iterations (default {DEFAULT_N})")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help=f"rounds (default {DEFAULT_ROUNDS})")
    p.add_argument("--repeat", type=int, default=None, help="test runs per measurement (default: ~2M iterations)")
    p.add_argument("--body", type=int, default=1, help="accumulator updates per iteration (default 1)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--plot", metavar="PATH", help="write a PNG bar chart (and PATH-scaling.png with --scaling)")
    p.add_argument("--scaling", action="store_true",
                   help="also measure verification cost and run time against n and body size, and find limits")
    p.set_defaults(func=cmd_loops)
    return p


def cmd_loops(args: argparse.Namespace, console: Any = None) -> int:
    from rich.console import Console

    if console is None:
        console = Console() if sys.stdout.isatty() else Console(width=200)
    err = Console(stderr=True)
    progress: Progress | None = None if args.json else (lambda msg: err.log(msg) if err.is_terminal else None)
    report = run_loops(args.n, args.rounds, body=args.body, repeat=args.repeat, progress=progress)
    if args.scaling:
        from .loop_scaling import run_scaling

        report.scaling = run_scaling(progress=progress)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render_table(report, console)
    if args.plot:
        path = Path(args.plot)
        plot_report(report, path)
        if report.scaling is not None:
            from .loop_scaling import plot_scaling

            plot_scaling(report.scaling, path.with_name(f"{path.stem}-scaling{path.suffix or '.png'}"))
    return 0 if all(r.ok for r in report.results) else 1
