"""``capsule fuzz``: mutated wasm modules, BPF objects and capsule metadata through capsule, from a seed.

    capsule fuzz [TARGET...] --seed N (--count N | --time SECONDS) [--seeds PATH...] [--out DIR] [--no-kernel]

Prints one line per target (inputs, outcomes, failures) and each failure with the command that runs its input
again; exits 1 when anything failed. ``--report FILE`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from capsule.cli.common import positive_int

DEFAULT_SEEDS = (".cache/wast", ".cache/tests")  # the suite's cached modules and objects, when they are there
MANY_SECONDS = 3 * 3600


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from capsule.fuzz import TARGETS

    s = sub.add_parser(
        "fuzz", help="run mutated inputs through capsule and report every traceback, hang, leak or kernel error",
        description="Mutate seed inputs (from --seed, reproducibly) and run each through capsule: wasm modules "
                    "through the reader, validator, compiler and kernel; BPF objects through the reader, "
                    "disassembler, optimizer and loader; capsule objects with changed metadata through the host.")
    s.add_argument("targets", nargs="*", metavar="TARGET",
                   help=f"what to fuzz ({', '.join(TARGETS)}; default: all)")
    s.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    s.add_argument("--count", type=positive_int, help="inputs per target")
    s.add_argument("--time", type=float, metavar="SECONDS", help="seconds per target")
    s.add_argument("--many", action="store_true", help=f"a long run: {MANY_SECONDS // 3600} hours per target, "
                                                       "with a report (fuzz-report.json unless --report)")
    s.add_argument("--start", type=int, default=0, help="the first input's index (to repeat one input)")
    s.add_argument("--seeds", action="append", default=[], metavar="PATH",
                   help=f"more seed files or folders (*.wasm, *.o; default: {', '.join(DEFAULT_SEEDS)} if present)")
    s.add_argument("--out", metavar="DIR", default="fuzz-failures", help="where failing inputs are written")
    s.add_argument("--no-kernel", action="store_true", help="stop before the kernel (no BPF needed)")
    s.add_argument("--report", metavar="FILE", help="write the figures and failures as JSON")
    s.set_defaults(func=cmd_fuzz)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from capsule.fuzz import TARGETS, run_target

    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        raise SystemExit(f"capsule fuzz: no target {unknown[0]!r} (choose from {', '.join(TARGETS)})")
    seconds = MANY_SECONDS if args.many and args.time is None else args.time
    count = args.count if args.count is not None or seconds is not None else 100
    seeds = [Path(p) for p in args.seeds] or [Path(p) for p in DEFAULT_SEEDS if Path(p).is_dir()]
    report_path = args.report or ("fuzz-report.json" if args.many else None)
    failed = 0
    summary = []
    for name in args.targets or list(TARGETS):
        target = TARGETS[name](not args.no_kernel, seeds)
        command = " ".join(["capsule", "fuzz", name, "--seed", str(args.seed),
                            *(f"--seeds {shlex.quote(str(p))}" for p in args.seeds),
                            *(["--no-kernel"] if args.no_kernel else [])])
        rep = run_target(target, seed=args.seed, start=args.start, count=count, seconds=seconds,
                         out_dir=Path(args.out), command=command,
                         progress=lambda r: print(f"  {r.target}: {r.inputs} inputs, {len(r.findings)} failures",
                                                  file=sys.stderr, flush=True))
        outcomes = ", ".join(f"{k} {v}" for k, v in rep.outcomes.most_common())
        print(f"{name}: {rep.inputs} inputs in {rep.seconds:.1f} s, {len(rep.findings)} failures ({outcomes})")
        for f in rep.findings:
            print(f"  FAIL {f.problem.kind} at {f.problem.where}: {f.problem.message}")
            print(f"    again: {f.command}")
            if f.input is not None:
                print(f"    input: {f.input}" + (f" (reduced: {f.reduced}, {f.reduced.stat().st_size} bytes)"
                                                 if f.reduced is not None else ""))
        failed += len(rep.findings)
        summary.append({"target": name, "seed": args.seed, "start": args.start, "inputs": rep.inputs,
                        "seconds": round(rep.seconds, 1), "kernel": not args.no_kernel,
                        "outcomes": dict(rep.outcomes),
                        "failures": [{"kind": f.problem.kind, "where": f.problem.where,
                                      "message": f.problem.message, "command": f.command,
                                      "input": str(f.input) if f.input else None} for f in rep.findings]})
    if report_path:
        Path(report_path).write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if failed else 0
