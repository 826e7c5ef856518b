"""``capsule disasm`` and ``capsule verify``: look at a BPF object as written, and as the verifier sees it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rich.table import Table

from capsule.cli.common import console, read_spec

if TYPE_CHECKING:
    from capsule.kernel.maps import Map


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def cmd_disasm(args: argparse.Namespace) -> int:
    from capsule.bpf.disasm import disassemble_object

    sys.stdout.write("\n".join(disassemble_object(read_spec(args.object), args.object)) + "\n")
    return 0


def verify_rows(path: str) -> list[dict[str, object]]:
    """Load every program of an object; one row per program (the shape of veristat's output)."""
    from capsule.bpf.uapi import ProgType
    from capsule.kernel.collection import create_maps, load_object_btf, load_program
    from capsule.kernel.consts import LogLevel
    from capsule.kernel.errors import BPFError, LoadError, VerifierError

    spec = read_spec(path)
    if not spec.programs:
        unplaced = spec.unlinked.unplaced if spec.unlinked is not None else []
        why = "; ".join(str(u) for u in unplaced) if unplaced else "the object holds no code"
        raise SystemExit(f"capsule: {path}: no program to load ({why})")
    rows: list[dict[str, object]] = []
    btf_fd = load_object_btf(spec)
    maps: dict[str, Map] = {}
    try:
        maps = create_maps(spec, btf_fd)
        for name, ps in spec.programs.items():
            tname = ProgType(ps.type).label.lower()
            row: dict[str, object] = {"program": name, "type": tname, "insns": sum(i.slots() for i in ps.insns)}
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
        out = console()
        out.print(table)
        for r in rows:
            if r["verdict"] != "success":
                where = f" at instruction {r['insn_index']}" if r.get("insn_index") is not None else ""
                out.print(f"[red]{r['program']}: rejected{where}: {r['reason']}[/red]", highlight=False)
    return 0 if all(r["verdict"] == "success" for r in rows) else 1
