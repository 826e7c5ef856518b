"""``capsule bench integers``: integer kernels natively, under wasmtime, and in the kernel through capsule.

Each kernel in ``kernels/`` is one freestanding C file exporting ``long long run(int n)``. The same source is
built three ways and run with the same ``n``:

* **native**: ``gcc -O2``, the kernel in its own translation unit (so the driver cannot fold or hoist the
  calls), linked with a small generated ``main`` that calls ``run(n)`` once to warm up, then ``reps`` times,
  each timed in-process with ``clock_gettime(CLOCK_MONOTONIC)``;
* **wasmtime**: ``clang-19 --target=wasm32 -O2``, the module run by the wasmtime Python package, each call
  timed with ``perf_counter_ns`` around it (the Python-to-wasm call costs about a microsecond; kernels run
  milliseconds);
* **kernel**: the same wasm compiled by ``capsule.compiler`` and called through ``capsule.runtime.Instance``.
  The time is the program's own **BPF run time** (``run_time_ns`` of ``bpf_prog_info`` with
  ``BPF_STATS_RUN_TIME`` enabled, summed over the call's invocations), so the syscall round trips and the
  Python around them are excluded; the wall time of ``Instance.call`` is reported beside it.

All three results must be equal; the table gives the best time of each and the ratios to native.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capsule.toolchain.cache import cache_dir

if TYPE_CHECKING:
    from capsule.compiler import Options

KERNEL_DIR = Path(__file__).parent / "kernels"

#: kernel -> (default n, what n counts)
KERNELS: dict[str, tuple[int, str]] = {
    "fib": (30, "fib(n), recursive"),
    "sieve": (4_000_000, "primes up to n"),
    "crc32": (4_000_000, "CRC-32 of n bytes"),
    "sort": (1_000_000, "quicksort of n ints"),
    "matmul": (160, "n x n int matrix product"),
}
#: small sizes for tests: every kernel runs in milliseconds
TINY: dict[str, int] = {"fib": 15, "sieve": 1000, "crc32": 1000, "sort": 1000, "matmul": 8}
DEFAULT_REPS = 5

WASM_FLAGS = [
    "--target=wasm32",
    "-O2",
    "-nostdlib",
    "-mbulk-memory",
    "-Wl,--no-entry",
    "-Wl,--export=run",
    "-Wl,--max-memory=268435456",
]
NATIVE_FLAGS = ["-O2", "-fno-lto"]

_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
long long run(int n);
int main(int argc, char **argv) {
    int n = atoi(argv[1]), reps = atoi(argv[2]);
    long long r = run(n);
    printf("%lld\n", r);
    for (int k = 0; k < reps; k++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        long long x = run(n);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (x != r) { printf("MISMATCH %lld\n", x); return 1; }
        printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    }
    return 0;
}
"""


class BenchError(Exception):
    """A kernel could not be built or gave different results in different runtimes."""


@dataclass
class KernelResult:
    """One row: a kernel's result in each runtime, its best times (ns per run) and the kernel-side figures."""

    name: str
    n: int
    what: str
    native_result: int | None = None
    wasmtime_result: int | None = None
    kernel_result: int | None = None
    native_ns: list[int] = field(default_factory=list)
    wasmtime_ns: list[int] = field(default_factory=list)
    kernel_ns: list[int] = field(default_factory=list)  # BPF run_time_ns per call
    kernel_wall_ns: list[int] = field(default_factory=list)  # Instance.call wall time
    invocations: float = 0.0  # per call
    transitions: float = 0.0  # region transitions per call
    load_ms: float = 0.0
    bpf_insns: int = 0
    error: str | None = None

    @property
    def agree(self) -> bool:
        return self.error is None and self.native_result == self.wasmtime_result == self.kernel_result

    @staticmethod
    def _best(xs: list[int]) -> int | None:
        return min(xs) if xs else None

    def ratio(self, xs: list[int]) -> float | None:
        a, b = self._best(xs), self._best(self.native_ns)
        return a / b if a is not None and b else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            agree=self.agree,
            kernel_over_native=self.ratio(self.kernel_ns),
            wasmtime_over_native=self.ratio(self.wasmtime_ns),
        )
        return d


# -- building ------------------------------------------------------------------------------------------------
def _cache_dir() -> Path:
    d = cache_dir("bench-integers")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BenchError(f"{name} is not installed (scripts/setup.sh installs the toolchain)")
    return path


def _cached_build(kind: str, name: str, inputs: str, build: Any) -> Path:
    """Build once per content: ``build(tmpdir) -> path`` runs only when the cached output is missing."""
    key = hashlib.sha256(inputs.encode()).hexdigest()[:16]
    out = _cache_dir() / f"{name}-{key}.{kind}"
    if not out.exists():
        with tempfile.TemporaryDirectory(dir=_cache_dir()) as tmp:
            os.replace(build(Path(tmp)), out)
    return out


def _run_tool(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise BenchError(f"{Path(cmd[0]).name} failed:\n{res.stderr.rstrip()}")


def build_wasm(name: str) -> bytes:
    src = KERNEL_DIR / f"{name}.c"

    def build(tmp: Path) -> Path:
        _run_tool([_tool("clang-19"), *WASM_FLAGS, str(src), "-o", str(tmp / "k.wasm")])
        return tmp / "k.wasm"

    return _cached_build("wasm", name, src.read_text() + repr(WASM_FLAGS), build).read_bytes()


def build_native(name: str) -> Path:
    src = KERNEL_DIR / f"{name}.c"

    def build(tmp: Path) -> Path:
        gcc = _tool("gcc")
        (tmp / "driver.c").write_text(_DRIVER)
        _run_tool([gcc, *NATIVE_FLAGS, "-c", str(src), "-o", str(tmp / "k.o")])
        _run_tool([gcc, *NATIVE_FLAGS, str(tmp / "driver.c"), str(tmp / "k.o"), "-o", str(tmp / "k")])
        return tmp / "k"

    return _cached_build("exe", name, src.read_text() + _DRIVER + repr(NATIVE_FLAGS), build)


# -- running -------------------------------------------------------------------------------------------------
def run_native(name: str, n: int, reps: int) -> tuple[int, list[int]]:
    exe = build_native(name)
    res = subprocess.run([str(exe), str(n), str(reps)], capture_output=True, text=True, timeout=600)
    lines = res.stdout.split()
    if res.returncode or len(lines) != reps + 1:
        raise BenchError(f"native {name} failed: {res.stdout[-200:]} {res.stderr[-200:]}")
    return int(lines[0]), [int(x) for x in lines[1:]]


def run_wasmtime(wasm: bytes, n: int, reps: int) -> tuple[int, list[int]]:
    import wasmtime

    store = wasmtime.Store(wasmtime.Engine())
    inst = wasmtime.Instance(store, wasmtime.Module(store.engine, wasm), [])
    run = inst.exports(store)["run"]
    assert isinstance(run, wasmtime.Func)
    result = run(store, n)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        r = run(store, n)
        times.append(time.perf_counter_ns() - t0)
        if r != result:
            raise BenchError(f"wasmtime gave {r}, then {result}")
    return int(result), times


def run_kernel(wasm: bytes, n: int, reps: int, row: KernelResult, options: Options | None = None) -> int:
    """Compile with capsule, load, call ``run(n)`` once to warm up and ``reps`` times under bpf_stats."""
    from capsule.compiler import compile_module
    from capsule.kernel.prog import bpf_stats
    from capsule.runtime import Instance
    from capsule.wasm import load

    spec = compile_module(load(wasm), options)
    row.bpf_insns = len(spec.programs["capsule_run"].insns)
    with Instance(spec) as inst:
        row.load_ms = inst.load_seconds * 1e3
        (result,) = inst.call("run", n)
        inv0, tr0 = inst.stats.invocations, inst.stats.transitions
        with bpf_stats():
            for _ in range(reps):
                before = inst.run_time_ns()
                t0 = time.perf_counter_ns()
                (r,) = inst.call("run", n)
                row.kernel_wall_ns.append(time.perf_counter_ns() - t0)
                row.kernel_ns.append(inst.run_time_ns() - before)
                if r != result:
                    raise BenchError(f"the kernel gave {r}, then {result}")
        row.invocations = (inst.stats.invocations - inv0) / max(reps, 1)
        row.transitions = (inst.stats.transitions - tr0) / max(reps, 1)
    return result


def run_one(
    name: str, n: int | None = None, reps: int = DEFAULT_REPS, options: Options | None = None
) -> KernelResult:
    default, what = KERNELS[name]
    row = KernelResult(name, n if n is not None else default, what)
    try:
        row.native_result, row.native_ns = run_native(name, row.n, reps)
        wasm = build_wasm(name)
        row.wasmtime_result, row.wasmtime_ns = run_wasmtime(wasm, row.n, reps)
        row.kernel_result = run_kernel(wasm, row.n, reps, row, options)
    except BenchError as e:
        row.error = str(e)
    return row


def run_integers(
    names: list[str] | None = None,
    sizes: dict[str, int] | None = None,
    reps: int = DEFAULT_REPS,
    progress: Any = None,
    options: Options | None = None,
) -> list[KernelResult]:
    rows = []
    for name in names or list(KERNELS):
        if progress:
            progress(f"{name} ...")
        rows.append(run_one(name, (sizes or {}).get(name), reps, options))
    return rows


# -- output --------------------------------------------------------------------------------------------------
def _ms(ns: int | None) -> str:
    return "" if ns is None else f"{ns / 1e6:.2f}"


def _x(r: float | None) -> str:
    return "" if r is None else f"{r:.2f}x"


def render_table(rows: list[KernelResult]) -> str:
    """A Markdown table (best of the repetitions, milliseconds) and the kernel-side figures."""
    head = (
        "| kernel | n | native ms | wasmtime ms | kernel ms (BPF run time) | kernel wall ms "
        "| wasmtime/native "
        "| kernel/native | transitions/call | invocations/call | agree |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        verdict = (
            "yes"
            if r.agree
            else "NO: " + (r.error or f"{r.native_result} {r.wasmtime_result} {r.kernel_result}")
        )
        lines.append(
            f"| {r.name} | {r.n:,} | {_ms(r._best(r.native_ns))} | {_ms(r._best(r.wasmtime_ns))} | "
            f"{_ms(r._best(r.kernel_ns))} | {_ms(r._best(r.kernel_wall_ns))} | "
            f"{_x(r.ratio(r.wasmtime_ns))} | "
            f"{_x(r.ratio(r.kernel_ns))} | {r.transitions:,.0f} | {r.invocations:.1f} | "
            f"{verdict} |"
        )
    return "\n".join(lines)


def machine() -> dict[str, str]:
    return {
        "kernel": platform.release(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }


# -- command line --------------------------------------------------------------------------------------------
def add_parser(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``bench integers`` in the ``bench`` group (``capsule.cli.bench``)."""
    p = bench.add_parser(
        "integers",
        help="integer kernels natively (gcc -O2), under wasmtime, and in the kernel",
        description="Run integer kernels (recursive fib, sieve, crc32, sort, matrix multiply) built from the "
        "same "
        "C natively with gcc -O2, under wasmtime and in the kernel through capsule; check the three "
        "results agree and print the best times and the ratios to native. Kernel time is BPF "
        "run_time_ns (bpf_stats) summed over a call's invocations.",
    )
    p.add_argument(
        "--kernel", action="append", choices=list(KERNELS), help="run only this kernel (repeatable)"
    )
    p.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, help=f"timed runs per kernel (default {DEFAULT_REPS})"
    )
    p.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test, not a measurement)")
    p.add_argument("--n", action="append", default=[], metavar="KERNEL=N", help="size for one kernel")
    p.add_argument(
        "--unchecked",
        action="store_true",
        help="compile for the kernel without memory bounds checks (Options(checked=False))",
    )
    p.add_argument(
        "--no-may-goto",
        action="store_true",
        help="compile for the kernel without may_goto (every loop back-edge through the dispatcher)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.set_defaults(func=cmd_integers)
    return p


def cmd_integers(args: argparse.Namespace) -> int:
    sizes = dict(TINY) if args.tiny else {}
    for item in args.n:
        k, _, v = item.partition("=")
        if k not in KERNELS or not v.isdigit():
            raise SystemExit(
                f"capsule bench integers: --n wants KERNEL=N with KERNEL one of {', '.join(KERNELS)}"
            )
        sizes[k] = int(v)
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    from capsule.compiler import Options

    options = Options(checked=not args.unchecked, may_goto=not args.no_may_goto)
    rows = run_integers(args.kernel, sizes, args.reps, progress, options)
    if args.json:
        print(
            json.dumps(
                {"machine": machine(), "options": asdict(options), "results": [r.to_json() for r in rows]},
                indent=2,
            )
        )
    else:
        m = machine()
        print(
            f"integer kernels, best of {args.reps}, {m['kernel']} {m['arch']}, {m['cpus']} CPUs; "
            "kernel build: "
            f"checked={options.checked} may_goto={options.may_goto}"
        )
        print(render_table(rows))
    return 0 if all(r.agree for r in rows) else 1
