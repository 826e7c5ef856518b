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

from capsule.runtime.wasi_host import ENGINES, WasiConfig, WasiError, WasiHost, parse_mapping

TRAP_STATUS = 134
DEFAULT_ENGINE = "kernel"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from capsule.cli_compile import _build_options, add_c_flags

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
    _build_options(s)
    s.set_defaults(func=cmd_run)


def build_c_object(sources: list[Path], flags: list[str], output: Path, options=None) -> Path:  # type: ignore[no-untyped-def]
    """``capsule build`` for C/C++: sources -> wasm (with the guest runtime) -> a BPF object at ``output``."""
    from capsule.bpf.elf_write import write_object
    from capsule.compiler import compile_module
    from capsule.toolchain_c import build_wasm
    from capsule.wasm import load

    wasm = build_wasm(sources, flags).wasm
    write_object(compile_module(load(wasm.read_bytes()), options), output)
    return output


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
    from capsule.cli_compile import _options
    from capsule.runtime.errors import GuestTrap
    from capsule.toolchain import ToolchainError
    from capsule.toolchain_c import build_wasm, is_source

    path = Path(args.program)
    if not path.is_file():
        raise SystemExit(f"capsule run: {path}: no such file")
    config = _config(args, path.name)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    if is_source(path):
        try:
            res = build_wasm([path], [f for f in args.cflags if f])
        except ToolchainError as e:
            print(f"capsule run: {e}", file=sys.stderr)
            return 1
        if res.diagnostics:
            sys.stderr.write(res.diagnostics)
        wasm: Path | None = res.wasm
    elif path.suffix == ".wasm":
        wasm = path
    elif path.name.endswith(".o"):
        wasm = None
    else:
        raise SystemExit(f"capsule run: {path}: not a .c/.cc/.cpp source, .wasm module or .bpf.o object")
    try:
        guest = _open(path, wasm, args.engine, _options(args))
        try:
            return WasiHost(guest, config).run()
        finally:
            guest.close()
    except GuestTrap as e:
        sys.stdout.flush()
        print(f"capsule: {path.name}: {e}", file=sys.stderr)
        return TRAP_STATUS
    except (WasiError, *_load_errors()) as e:
        print(f"capsule run: {path.name}: {e}", file=sys.stderr)
        return 1


def _load_errors() -> tuple[type[Exception], ...]:
    """What building or loading for the kernel can fail with (reported as one line, exit status 1)."""
    from capsule.compiler import CompileError
    from capsule.kernel.collection import LoadError
    from capsule.runtime.errors import CallError, GuestRejected
    from capsule.wasm import WasmError

    return (CompileError, LoadError, CallError, GuestRejected, WasmError)


def _open(path: Path, wasm: Path | None, engine: str, options):  # type: ignore[no-untyped-def]
    from capsule.runtime.wasi_host import KernelGuest, open_guest

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


def main(argv: list[str] | None = None) -> int:
    """``python -m capsule.cli_run run ...``: the command on its own (capsule.cli wires it as ``capsule run``)."""
    parser = argparse.ArgumentParser(prog="capsule")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
