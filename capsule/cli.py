"""The ``capsule`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _read(path: str):  # -> ObjectSpec
    from capsule.bpf.elf import ObjectError, read_object

    try:
        return read_object(Path(path))
    except FileNotFoundError:
        raise SystemExit(f"capsule: {path}: no such file") from None
    except ObjectError as e:  # its message starts with the path
        raise SystemExit(f"capsule: {e}") from None


def cmd_disasm(args: argparse.Namespace) -> int:
    from capsule.bpf.disasm import disassemble_object

    sys.stdout.write("\n".join(disassemble_object(_read(args.object), args.object)) + "\n")
    return 0


def verify_rows(path: str) -> list[dict]:
    """Load every program of an object; one row per program (the shape of veristat's output)."""
    from capsule.kernel.collection import LoadError, create_maps, load_object_btf, load_program
    from capsule.kernel.consts import LogLevel, ProgType
    from capsule.kernel.errors import BPFError, VerifierError

    spec = _read(path)
    if not spec.programs:
        unplaced = spec.unlinked.unplaced if spec.unlinked is not None else []
        why = "; ".join(str(u) for u in unplaced) if unplaced else "the object holds no code"
        raise SystemExit(f"capsule: {path}: no program to load ({why})")
    rows: list[dict] = []
    btf_fd = load_object_btf(spec)
    maps = {}
    try:
        maps = create_maps(spec, btf_fd)
        for name, ps in spec.programs.items():
            tname = ProgType(ps.type).label.lower()
            row: dict = {"program": name, "type": tname, "insns": sum(i.slots() for i in ps.insns)}
            try:
                prog = load_program(ps, maps, btf_fd, log_level=LogLevel.BRANCHES | LogLevel.STATS)
            except VerifierError as e:
                row.update(verdict="failure", reason=e.reason or str(e), insn_index=e.insn_index)
                st = None
            except (BPFError, LoadError) as e:
                row.update(verdict="failure", reason=str(e))
                st = None
            else:
                with prog:
                    st, info = prog.stats, prog.info()
                    row.update(
                        verdict="success", jited_size=info.jited_prog_len, verified_insns=info.verified_insns
                    )
            if st is not None:
                row.update(
                    processed_insns=st.processed_insns,
                    total_states=st.total_states,
                    peak_states=st.peak_states,
                    verification_time_us=st.verification_time_usec,
                )
            rows.append(row)
    finally:
        for m in maps.values():
            m.close()
        if btf_fd is not None:
            btf_fd.close()
    return rows


def cmd_verify(args: argparse.Namespace) -> int:
    rows = verify_rows(args.object)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        table = Table(title=args.object)
        cols = [
            ("program", "Program"),
            ("type", "Type"),
            ("verdict", "Verdict"),
            ("processed_insns", "Insns processed"),
            ("total_states", "Total states"),
            ("peak_states", "Peak states"),
            ("verification_time_us", "Verify time (us)"),
            ("insns", "Program insns"),
            ("jited_size", "JITed bytes"),
        ]
        for _, title in cols:
            table.add_column(title, justify="left" if title in ("Program", "Type", "Verdict") else "right")
        for r in rows:
            table.add_row(*("" if r.get(k) is None else str(r[k]) for k, _ in cols))
        console = _console()
        console.print(table)
        for r in rows:
            if r["verdict"] != "success":
                where = f" at instruction {r['insn_index']}" if r.get("insn_index") is not None else ""
                console.print(f"[red]{r['program']}: rejected{where}: {r['reason']}[/red]", highlight=False)
    return 0 if all(r["verdict"] == "success" for r in rows) else 1


def _console() -> Console:
    # rich wraps to 80 columns when not on a terminal; tables read better unwrapped in logs and pipes
    return Console() if sys.stdout.isatty() else Console(width=160)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.packet:
        from capsule.demo import run_demo

        return run_demo(_console())
    from capsule.demo_c import run_c_demo

    return run_c_demo(_console())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="capsule", description="Run ordinary programs inside the Linux kernel as eBPF."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "disasm",
        help="disassemble each program of a BPF object",
        description="Disassemble each program of a BPF ELF object (text as llvm-objdump -d).",
    )
    s.add_argument("object", help="a BPF ELF object (.o)")
    s.set_defaults(func=cmd_disasm)

    s = sub.add_parser(
        "verify",
        help="load every program of an object and report the verifier's figures",
        description="Load every program of a BPF object into the kernel and print a veristat-like "
        "row per program. Exit status 1 if any program is rejected.",
    )
    s.add_argument("object", help="a BPF ELF object (.o)")
    s.add_argument("--json", action="store_true", help="print the rows as JSON")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("demo", help="run a bundled C program in the kernel next to its native build",
                       description="Build the bundled C program (capsule/examples/wordcount_primes.c) natively with "
                                   "gcc and with capsule, run both, and show the outputs side by side with the time "
                                   "ratio; exit status 1 if they differ. --packet runs the XDP demo instead: a "
                                   "BPF C program compiled by clang-19, loaded by capsule's own loader and run on "
                                   "packets, with the verifier's figures.")
    s.add_argument("--packet", action="store_true", help="the XDP packet demo (capsule's loader, no compiler)")
    s.set_defaults(func=cmd_demo)

    from capsule.cli_compile import add_parsers as add_compile_parsers
    from capsule.cli_run import add_parsers as add_run_parsers

    add_compile_parsers(sub)
    add_run_parsers(sub)
    from capsule.cli_opt import add_parsers as add_opt_parsers

    add_opt_parsers(sub)

    from capsule.bench.loops import add_parser as add_bench_loops

    add_bench_loops(sub)
    from capsule.bench.integers import add_parser as add_bench_integers

    add_bench_integers(sub)
    from capsule.bench.opt import add_parser as add_bench_opt

    add_bench_opt(sub)
    return p


def _capsule_errors() -> tuple[type[Exception], ...]:
    from capsule.kernel.collection import LoadError
    from capsule.runtime import CallError, GuestRejected
    from capsule.toolchain import ToolchainError

    return (LoadError, ToolchainError, CallError, GuestRejected)


CAPSULE_ERRORS = _capsule_errors()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except CAPSULE_ERRORS as e:
        print(f"capsule: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `capsule disasm x.o | head`
        sys.stderr.close()
        return 0
    except PermissionError as e:
        print(f"capsule: {e} (loading BPF programs needs root or CAP_BPF)", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"capsule: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
