"""``capsule demo``: the README's main job (``capsule.demo``)."""

from __future__ import annotations

import argparse

from capsule.cli.common import console


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("demo", help="run a bundled C program in the kernel next to its native build",
                       description="Build the bundled C program (capsule/examples/wordcount_primes.c) natively with "
                                   "gcc and with capsule, run both, and show the outputs side by side with the time "
                                   "ratio; exit status 1 if they differ. --packet runs the XDP demo instead: a "
                                   "BPF C program compiled by clang-19, loaded by capsule's own loader and run on "
                                   "packets, with the verifier's figures.")
    s.add_argument("--packet", action="store_true", help="the XDP packet demo (capsule's loader, no compiler)")
    s.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.packet:
        from capsule.demo.packet import run_demo

        return run_demo(console())
    from capsule.demo.c_program import run_c_demo

    return run_c_demo(console())
