"""``capsule opt IN.o -o OUT.o``: optimise every program of a BPF object, proving each pass in the kernel.

Without ``--no-check`` every pass's result is loaded next to the original and run on generated inputs
(``capsule.opt.check``); a pass that fails is rolled back for that program and reported, and a pass whose
result would make the verifier process more instructions is skipped for that program (also reported).
``--report`` prints per program NI (instruction slots) and, when checked, NPI (verifier processed
instructions), verification time and JITed size before and after, plus what each pass saved and what was
rolled back.
"""

from __future__ import annotations

import argparse
import sys

from capsule.cli.common import read_spec


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from capsule.opt.passes import DEFAULT_PASSES

    s = sub.add_parser(
        "opt",
        help="optimise a BPF object (verifier-aware passes, each proven in the kernel)",
        description="Optimise every program of a BPF ELF object and write a standard object that libbpf and "
        "bpftool load. Each pass's result is loaded and run against the original unless --no-check.",
    )
    s.add_argument("object", help="input BPF ELF object (.o)")
    s.add_argument("-o", "--output", required=True, help="where to write the optimised object")
    s.add_argument("--no-check", action="store_true", help="do not load or run anything (no BPF needed)")
    s.add_argument("--passes", default=",".join(DEFAULT_PASSES),
                   help=f"comma-separated passes, in order (default: {','.join(DEFAULT_PASSES)})")
    s.add_argument("--report", action="store_true", help="print per-program figures before and after")
    s.set_defaults(func=cmd_opt)


def cmd_opt(args: argparse.Namespace) -> int:
    from capsule.bpf.elf_write import write_object
    from capsule.opt.check import Checker
    from capsule.opt.pipeline import (
        CodeOutsideProgramsError,
        make_passes,
        optimize_object,
        refuse_code_outside_programs,
    )

    spec = read_spec(args.object)
    try:
        passes = make_passes([p.strip() for p in args.passes.split(",") if p.strip()])
    except ValueError as e:
        raise SystemExit(f"capsule opt: {e}") from None
    try:
        refuse_code_outside_programs(spec)  # before loading anything
    except CodeOutsideProgramsError as e:
        raise SystemExit(f"capsule opt: {args.object}: {e}") from None
    checker = None if args.no_check else Checker(spec)
    try:
        if checker is not None:
            for name in spec.programs:
                checker.reference(name)
        result = optimize_object(spec, passes, checker)
        if checker is not None:
            for name, r in result.programs.items():
                r.before_stats = checker.refs[name].stats.as_dict()
                r.check_note = checker.refs[name].note
                after = checker.last_stats.get(name) if r.records else checker.refs[name].stats
                r.after_stats = after.as_dict() if after is not None else None
    finally:
        if checker is not None:
            checker.close()
    write_object(result.spec, args.output)
    out = sys.stdout
    for name, r in result.programs.items():
        out.write(f"{name}: {r.ni_before} -> {r.ni_after} insns ({r.seconds * 1000:.1f} ms)")
        out.write(f"; {r.check_note}\n" if r.check_note else "; not checked (--no-check)\n")
        for rec in r.failed():
            out.write(f"  rolled back {rec.name}: {rec.reason}\n")
        for rec in r.npi_refused():
            out.write(f"  skipped {rec.name} (round {rec.round}): {rec.reason}\n")
        if args.report:
            saved = ", ".join(f"{k} -{v}" for k, v in r.saved_by_pass().items() if v) or "nothing"
            out.write(f"  saved by pass: {saved}\n")
            if r.before_stats and r.after_stats:
                for key in ("processed_insns", "verification_time_us", "jited_size"):
                    out.write(f"  {key}: {r.before_stats[key]} -> {r.after_stats[key]}\n")
    return 0
