"""``capsule probe``: what this kernel's BPF can do (``capsule.kernel.probe``) and the profile picked for it
(``capsule.kernel.profiles``)."""

from __future__ import annotations

import argparse
import json
import os

from rich.table import Table

from capsule.cli.common import console


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("probe", help="probe the running kernel's BPF features and pick a kernel profile",
                       description="Load tiny maps and programs, one feature each, and print what this kernel "
                                   "accepts (with the kernel's reason when it refuses), then the richest kernel "
                                   "profile it supports. Exit status 1 if no profile fits.")
    s.add_argument("--json", action="store_true", help="print the probes and the profile as JSON")
    s.set_defaults(func=cmd_probe)


def cmd_probe(args: argparse.Namespace) -> int:
    from capsule.kernel.probe import PROBES, probe_all
    from capsule.kernel.profiles import NoProfile, best_profile

    results = probe_all()
    try:
        picked, why = best_profile(results), ""
    except NoProfile as e:
        picked, why = None, str(e)
    if args.json:
        doc = {"kernel": os.uname().release, "probes": [r.as_dict() for r in results.values()],
               "profile": picked.name if picked else None, "reason": why}
        print(json.dumps(doc, indent=2))
        return 0 if picked else 1
    out = console()
    table = Table(title=f"BPF features of Linux {os.uname().release}")
    for col in ("probe", "feature", "since", "here", "detail"):
        table.add_column(col)
    for p in PROBES:
        r = results[p.name]
        table.add_row(p.name, p.title, p.since, "yes" if r.ok else "[red]no[/red]", r.detail)
    out.print(table)
    if picked is None:
        out.print(f"profile: none ({why})")
        return 1
    out.print(f"profile: [bold]{picked.name}[/bold] ({picked.window} window, cpu v{picked.cpu}, "
              f"may_goto {'yes' if picked.may_goto else 'no'}; {picked.kernels})")
    return 0
