"""``capsule bench``: the one command group of the measurements; each ``capsule.bench`` module that has a
command registers it here through the ``add_parser(bench)`` it exports."""

from __future__ import annotations

import argparse


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from capsule.bench import integers, loops, opt

    bench = sub.add_parser("bench", help="benchmarks (loop mechanisms, integer kernels, optimiser)",
                           description="Measure what the kernel's BPF machinery costs.")
    group = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for module in (loops, integers, opt):
        module.add_parser(group)
