"""``capsule run``: build (if needed) and run a program with its WASI system: a C/C++ source, a wasm32-wasi
module, or a BPF object built by capsule.

    capsule run [OPTIONS] PROGRAM [ARGS...]

Options come before PROGRAM; everything after it goes to the program. Standard output and error stream as the
guest produces them, and capsule exits with the guest's exit status (134 after a guest trap, like abort).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from capsule.cli.common import about, add_build_options, add_c_flags, compile_options
from capsule.runtime.wasi_host import WasiConfig, WasiError, WasiHost, parse_mapping
from capsule.testing.engines import ENGINES

if TYPE_CHECKING:
    from capsule.compiler import Options
    from capsule.runtime.wasi_host import Guest

TRAP_STATUS = 134  # what a native program that calls abort() exits with
DEFAULT_ENGINE = "kernel"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "run", help="build and run a C/C++ program, wasm32-wasi module or capsule BPF object",
        description="Run PROGRAM (.c/.cc/.cpp built with clang-19 and capsule's WASI runtime, cached by content "
                    "hash; a .wasm module; or a .bpf.o from capsule build) with ARGS. Output streams as it is "
                    "produced; the exit status is the program's.")
    s.add_argument("program", help="a .c, .cc, .cpp, .wasm or .bpf.o file")
    s.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    s.add_argument("--file", action="append", default=[], metavar="HOST[:GUEST]",
                   help="place a host file in the guest's file system (default: at the same relative path)")
    s.add_argument("--dir", action="append", default=[], metavar="HOST[:GUEST]",
                   help="place a host directory tree in the guest's file system")
    s.add_argument("--out", metavar="DIR", help="after the run, write the files the guest created or changed here")
    s.add_argument("--stdin", metavar="FILE|-", help="standard input (default: empty)")
    s.add_argument("--env", action="append", default=[], metavar="K=V", help="an environment variable")
    s.add_argument("--engine", choices=ENGINES, default=DEFAULT_ENGINE,
                   help="kernel (default) or wasmtime, the reference the kernel is tested against")
    add_c_flags(s)
    add_build_options(s)
    s.set_defaults(func=cmd_run)


def _config(args: argparse.Namespace, argv0: str) -> WasiConfig:
    for kv in args.env:
        if "=" not in kv:
            raise SystemExit(f"capsule run: --env {kv!r}: expected K=V")
    stdin = None
    if args.stdin == "-":
        stdin = sys.stdin.buffer
    elif args.stdin is not None:
        try:
            stdin = Path(args.stdin).read_bytes()
        except OSError as e:
            raise SystemExit(f"capsule run: --stdin {args.stdin}: {e.strerror}") from None
    return WasiConfig(args=[argv0, *args.args], env=list(args.env), files=[parse_mapping(f) for f in args.file],
                      dirs=[parse_mapping(d) for d in args.dir], stdin=stdin,
                      out_dir=Path(args.out) if args.out else None,
                      interactive=sys.stdout.isatty() or sys.stderr.isatty())


def cmd_run(args: argparse.Namespace) -> int:
    from capsule.runtime.errors import GuestTrap
    from capsule.toolchain.guest import build_wasm, is_source

    path = Path(args.program)
    if not path.is_file():
        raise SystemExit(f"capsule run: {path}: no such file")
    config = _config(args, path.name)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    if is_source(path):
        res = build_wasm([path], [f for f in args.cflags if f])
        if res.diagnostics:
            sys.stderr.write(res.diagnostics)
        wasm: Path | None = res.wasm
    elif path.suffix == ".wasm":
        wasm = path
    elif path.name.endswith(".o"):
        wasm = None
    else:
        raise SystemExit(f"capsule run: {path}: not a .c/.cc/.cpp source, .wasm module or .bpf.o object")
    with about(path.name):
        try:
            guest = _open(path, wasm, args.engine, compile_options(args))
            try:
                return WasiHost(guest, config).run()
            finally:
                guest.close()
        except GuestTrap as e:  # the program's end, as abort() ends a native one
            sys.stdout.flush()
            print(f"capsule: {path.name}: {e}", file=sys.stderr)
            return TRAP_STATUS


def _open(path: Path, wasm: Path | None, engine: str, options: Options) -> Guest:
    from capsule.runtime.wasi_host import KernelGuest
    from capsule.testing.engines import open_guest

    if wasm is None:
        if engine != "kernel":
            raise WasiError(f"{path.name} is a BPF object: it runs in the kernel only (--engine kernel)")
        from capsule.runtime.instance import Instance

        guest = KernelGuest(Instance(path))
        if not guest.has_export("capsule_io"):
            guest.close()
            raise WasiError(f"{path.name} was not built from a program with capsule's WASI runtime")
        return guest
    return open_guest(wasm, engine, options)
