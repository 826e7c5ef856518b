"""What the map window costs, measured on one kernel with both tiers: the integer kernels (``capsule bench
integers``' C, built to wasm once) compiled on the host for three builds, then loaded and run where they are
measured (inside a VM booted by ``capsule.testing.qemu``, or on the host), so that the guest spends its
emulated time on the kernel's work and not on capsule's compiler.

Builds: ``arena-v4`` (what 6.12 and later get), ``map-v4`` with may_goto (the same code on the map window:
the window's own cost), and ``map-v3`` (what 6.1 gets: no may_goto, cpu v3). A figure is the BPF run time of a
call (``bpf_stats``), best of ``reps`` after one warm-up call; every call's result must equal the first build's.

``python -m capsule.bench.vm_cost [--kernel 6.12] [--host] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from capsule.bench import integers
from capsule.bpf.elf_write import write_object
from capsule.compiler import Options, compile_module
from capsule.sources.kernels import KERNELS, prepared
from capsule.testing.qemu import VM
from capsule.testing.vm import MAP_V3, REPO, echo_for
from capsule.wasm import load

BUILDS = {"arena-v4": Options(), "map-v4": Options(window="map"), "map-v3": Options(**MAP_V3)}
REPS = 3

# run in the guest (or on the host): load each object, call run(n) once, then REPS times under bpf_stats
GUEST_COST = """
import json, sys, time
from capsule.bpf.elf import read_object
from capsule.kernel.prog import bpf_stats
from capsule.runtime import Instance
out, reps, jobs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
rows = []
for obj, n in jobs:
    row = {"object": obj.rsplit("/", 1)[-1], "n": n}
    try:
        with Instance(read_object(obj)) as inst:
            row["load_s"] = inst.load_seconds
            (row["result"],) = inst.call("run", n)
            ns = []
            with bpf_stats():
                for _ in range(reps):
                    before = inst.run_time_ns()
                    inst.call("run", n)
                    ns.append(inst.run_time_ns() - before)
            row["best_ns"] = min(ns)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    rows.append(row)
    with open(out + "/cost.json", "w") as f:
        json.dump(rows, f)
"""


def build_objects(out: Path) -> list[tuple[str, int]]:
    """Every kernel for every build, as objects in ``out``: (path, n) pairs."""
    jobs = []
    for name, (n, _) in integers.KERNELS.items():
        module = load(integers.build_wasm(name))
        for tag, options in BUILDS.items():
            obj = out / f"{name}.{tag}.o"
            write_object(compile_module(module, options), obj)
            jobs.append((str(obj), n))
    return jobs


def _command(out: Path, jobs: list[tuple[str, int]], reps: int) -> list[str]:
    return [sys.executable, "-", str(out), str(reps), json.dumps(jobs)]


def measure(kernel: str | None, reps: int = REPS, timeout: float = 3600) -> list[dict[str, object]]:
    """The rows measured on ``kernel`` (a label of ``KERNELS``, booted under qemu) or on the host (None)."""
    with tempfile.TemporaryDirectory(prefix=f"capsule-cost-{kernel or 'host'}-") as tmp:
        out = Path(tmp)
        jobs = build_objects(out)
        argv = _command(out, jobs, reps)
        if kernel is None:
            subprocess.run(argv, input=GUEST_COST, text=True, cwd=REPO, check=False)
        else:
            script = f"{shlex.join(argv)} <<'EOF'\n{GUEST_COST.strip()}\nEOF\n"
            VM(prepared(kernel), script, out=out, cwd=REPO, echo=echo_for(kernel)).run(timeout)
        path = out / "cost.json"
        rows: list[dict[str, object]] = json.loads(path.read_text()) if path.exists() else []
    return rows


def table(results: dict[str, list[dict[str, object]]]) -> str:
    """One line per kernel and place: ms per build and the ratios to arena-v4 there."""
    lines = [f"{'kernel':8} {'where':6} " + " ".join(f"{t:>10}" for t in BUILDS) + "   map-v4/arena  map-v3/arena"]
    for where, rows in results.items():
        by = {str(r["object"]): r for r in rows}
        for name in integers.KERNELS:
            ms = []
            for tag in BUILDS:
                r = by.get(f"{name}.{tag}.o", {})
                best = r.get("best_ns")
                ms.append(float(best) / 1e6 if isinstance(best, int) else None)
            cells = " ".join(f"{m:10.2f}" if m is not None else f"{'error':>10}" for m in ms)
            ratios = "  ".join(f"{m / ms[0]:12.2f}" if m is not None and ms[0] else f"{'-':>12}" for m in ms[1:])
            lines.append(f"{name:8} {where:6} {cells}   {ratios}")
        lines += [f"{where}: {r['object']}: {r['error']}" for r in rows if "error" in r]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m capsule.bench.vm_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--kernel", action="append", choices=sorted(KERNELS), help="boot this kernel (repeatable)")
    p.add_argument("--host", action="store_true", help="measure on the running kernel too")
    p.add_argument("--reps", type=int, default=REPS)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    results = {label: measure(label, args.reps) for label in args.kernel or []}
    if args.host or not args.kernel:
        results["host"] = measure(None, args.reps)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0 if all(rows and all("error" not in r for r in rows) for rows in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
