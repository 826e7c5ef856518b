"""``capsule run``: build (if needed) and run a program with its WASI system: C/C++ sources, a wasm32-wasi
module, or a BPF object built by capsule.

    capsule run [OPTIONS] PROGRAM [ARGS...]
    capsule run [OPTIONS] SOURCE... -- [ARGS...]

Options come before the program. The operands are split at the first ``--``: what is before it is the program
(C/C++ sources, or one .wasm or .bpf.o), what is after it the program's arguments. Without ``--`` the first
operand is the program and all the others are its arguments, as before several sources were possible, so
``capsule run prog.c x y`` still passes x and y; a program that wants ``--`` among its arguments gets it after
the separator (``capsule run prog.c -- a -- b`` passes ``a -- b``). Standard output and error stream as the
guest produces them, and capsule exits with the guest's exit status (134 after a guest trap, like abort).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from capsule.cli.common import about, add_build_options, add_c_flags, compile_options, progress_printer
from capsule.runtime.wasi_host import WasiConfig, WasiError, WasiHost, parse_mapping
from capsule.testing.engines import ENGINES

if TYPE_CHECKING:
    from capsule.compiler import Options
    from capsule.runtime.wasi_host import Guest
    from capsule.toolchain.progress import Progress

TRAP_STATUS = 134  # what a native program that calls abort() exits with
DEFAULT_ENGINE = "kernel"
SEPARATOR = "--"
USAGE = ("capsule run [OPTIONS] PROGRAM [ARGS...]\n       capsule run [OPTIONS] SOURCE... -- [ARGS...]")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "run", help="build and run a C/C++ program, wasm32-wasi module or capsule BPF object", usage=USAGE,
        description="Run PROGRAM (C/C++ sources built with clang-19 and capsule's WASI runtime, each object cached "
                    "by content; a .wasm module; or a .bpf.o from capsule build) with ARGS. Several sources are "
                    "given before `--`, the arguments after it; without `--` the first operand is the program and "
                    "the rest are its arguments. Output streams as it is produced; the exit status is the "
                    "program's.")
    s.add_argument("operands", nargs=argparse.REMAINDER, metavar="PROGRAM [ARGS...] | SOURCE... -- [ARGS...]",
                   help="the program (.c, .cc, .cpp sources, or one .wasm or .bpf.o), then its arguments")
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


def split_operands(operands: list[str]) -> tuple[list[str], list[str]]:
    """(program inputs, the program's arguments): split at the first ``--``, else the first operand alone. A
    ``--`` before any operand only ends capsule's options (``capsule run -- -odd-name.c``)."""
    if operands[:1] == [SEPARATOR]:
        operands = operands[1:]
    if SEPARATOR in operands:
        i = operands.index(SEPARATOR)
        inputs, rest = operands[:i], operands[i + 1:]
        if not inputs:
            raise SystemExit(f"capsule run: no program before `{SEPARATOR}` (usage: {USAGE.splitlines()[1].strip()})")
        return inputs, rest
    if not operands:
        raise SystemExit(f"capsule run: no program given (usage: {USAGE.splitlines()[0]})")
    return operands[:1], operands[1:]


def _inputs(names: list[str]) -> list[Path]:
    """The program's files: C/C++ sources, or one .wasm or .bpf.o; a clear error for anything else."""
    from capsule.toolchain.guest import is_source

    paths = [Path(n) for n in names]
    for p in paths:
        if not p.is_file():
            raise SystemExit(f"capsule run: {p}: no such file")
    if len(paths) > 1 and not all(is_source(p) for p in paths):
        odd = next(p for p in paths if not is_source(p))
        raise SystemExit(f"capsule run: {odd}: only C/C++ sources can be combined (give one .wasm or .bpf.o alone); "
                         f"if it is an argument, put `{SEPARATOR}` before it")
    p = paths[0]
    if not (is_source(p) or p.suffix == ".wasm" or p.name.endswith(".o")):
        raise SystemExit(f"capsule run: {p}: not a .c/.cc/.cpp source, .wasm module or .bpf.o object")
    return paths


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
    return WasiConfig(args=[argv0, *args.program_args], env=list(args.env), files=[parse_mapping(f) for f in args.file],
                      dirs=[parse_mapping(d) for d in args.dir], stdin=stdin,
                      out_dir=Path(args.out) if args.out else None,
                      interactive=sys.stdout.isatty() or sys.stderr.isatty())


def cmd_run(args: argparse.Namespace) -> int:
    from capsule.runtime.errors import GuestTrap
    from capsule.toolchain.clang import ToolchainError
    from capsule.toolchain.guest import build_wasm, is_source

    names, args.program_args = split_operands(list(args.operands))
    paths = _inputs(names)
    path = paths[0]
    config = _config(args, path.name)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    if is_source(path):
        try:
            res = build_wasm(paths, [f for f in args.cflags if f], progress=progress_printer())
        except ToolchainError as e:
            raise ToolchainError(f"{e}{_separator_hint(e, args.operands)}") from None
        if res.diagnostics:
            sys.stderr.write(res.diagnostics)
        wasm: Path | None = res.wasm
    elif path.suffix == ".wasm":
        wasm = path
    else:
        wasm = None
    with about(path.name):
        try:
            guest = _open(path, wasm, args.engine, compile_options(args), progress_printer())
            try:
                return WasiHost(guest, config).run()
            finally:
                guest.close()
        except GuestTrap as e:  # the program's end, as abort() ends a native one
            sys.stdout.flush()
            print(f"capsule: {path.name}: {e}", file=sys.stderr)
            return TRAP_STATUS


def _separator_hint(error: Exception, operands: list[str]) -> str:
    """A failed link of one source while more sources were given as its arguments: say how to give them."""
    from capsule.toolchain.guest import is_source

    extra = [o for o in operands[1:] if is_source(o) and Path(o).is_file()]
    if SEPARATOR in operands or not extra or "undefined symbol" not in str(error):
        return ""
    return (f"\nnote: {', '.join(extra)} became the program's arguments; to build several sources, end them with "
            f"`{SEPARATOR}`: capsule run {' '.join([operands[0], *extra])} {SEPARATOR} ...")


def _open(path: Path, wasm: Path | None, engine: str, options: Options, progress: Progress) -> Guest:
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
    return open_guest(wasm, engine, options, progress)
