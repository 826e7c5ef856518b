"""``capsule demo``: the README's main job (``capsule.demo``), and ``capsule demo doom``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from capsule.cli.common import console, progress_printer
from capsule.testing.engines import ENGINES

DEMOS = ("doom",)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("demo", help="run a bundled C program in the kernel next to its native build (or DOOM)",
                       description="Build the bundled C program (capsule/examples/wordcount_primes.c) natively with "
                                   "gcc and with capsule, run both, and show the outputs side by side with the time "
                                   "ratio; exit status 1 if they differ. --packet runs the XDP demo instead: a "
                                   "BPF C program compiled by clang-19, loaded by capsule's own loader and run on "
                                   "packets, with the verifier's figures. `capsule demo doom` plays DOOM "
                                   "(doomgeneric and Freedoom, fetched from PyPI and Debian on first use) one game "
                                   "tick and its frame per run, shown in the terminal or written as PNGs.")
    s.add_argument("demo", nargs="?", choices=DEMOS, help="doom: DOOM on ENGINE (default: the C program demo)")
    s.add_argument("--packet", action="store_true", help="the XDP packet demo (capsule's loader, no compiler)")
    d = s.add_argument_group("doom")
    d.add_argument("--engine", choices=ENGINES, default="kernel", help="kernel (default) or wasmtime")
    d.add_argument("--frames", type=int, default=None, help="frames to play (default: the whole scripted walk)")
    d.add_argument("--png", type=Path, metavar="DIR", help="write every frame as DIR/frame-NNNN.png")
    d.add_argument("--no-terminal", dest="terminal", action="store_false",
                   help="do not draw the frames in the terminal (they are drawn when stdout is one and --png is not "
                        "given)")
    d.add_argument("--log", action="store_true", help="print DOOM's own start-up log on stderr")
    s.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.demo == "doom":
        return cmd_doom(args)
    if args.packet:
        from capsule.demo.packet import run_demo

        return run_demo(console())
    from capsule.demo.c_program import run_c_demo

    return run_c_demo(console())


def cmd_doom(args: argparse.Namespace) -> int:
    from capsule.demo import doom as demo
    from capsule.sources import doom

    frames = demo.DEMO_FRAMES if args.frames is None else args.frames
    if frames <= 0:
        raise SystemExit("capsule demo doom: --frames must be positive")
    print("capsule: fetching and building DOOM (cached after the first time)", file=sys.stderr)
    tree = doom.fetch()
    wasm = doom.build_wasm(tree, progress=progress_printer())
    wad = doom.wad()
    if args.engine == "kernel":
        print("capsule: compiling DOOM to BPF and loading it into the kernel (about a minute)", file=sys.stderr)
    show = args.terminal and args.png is None and sys.stdout.isatty()
    return demo.run_demo(wasm, wad, engine=args.engine, frames=frames, png_dir=args.png, show=show,
                         out=sys.stderr.buffer if args.log else None)
