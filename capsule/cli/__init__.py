"""The ``capsule`` command: the parser, ``main``, and the one table that says what an error ending a command
becomes (``errors``). One module per command group: ``inspect`` (disasm, verify), ``demo``, ``build`` (build,
call), ``run``, ``opt``, ``bench``, ``probe``; what several of them share is in ``common``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import cache

from capsule.cli.common import Failure

PERMISSION_HINT = " (loading BPF programs needs root or CAP_BPF)"


@cache
def errors() -> tuple[tuple[tuple[type[Exception], ...], int, str], ...]:
    """(error classes, exit status, hint after the message): how ``main`` reports an error that ends a command,
    as one line ``capsule: [SUBJECT: ]ERROR[HINT]``. The first row the error belongs to decides, so subclasses
    come before their bases; an error in no row is a bug in capsule and keeps its traceback."""
    from capsule.bpf.elf import ObjectError
    from capsule.bpf.elf_write import WriteError
    from capsule.kernel.errors import LoadError
    from capsule.opt.rewrite import RewriteError
    from capsule.runtime.errors import CallError, GuestRejected, GuestTrap
    from capsule.runtime.wasi_host import WasiError
    from capsule.sources.fetch import FetchError
    from capsule.toolchain.clang import ToolchainError
    from capsule.wasm import WasmError

    return (
        ((PermissionError,), 1, PERMISSION_HINT),
        ((LoadError, ToolchainError, CallError, GuestRejected, GuestTrap, WasiError, WasmError, FetchError,
          ObjectError, WriteError, RewriteError, OSError), 1, ""),
    )


def build_parser() -> argparse.ArgumentParser:
    from capsule.cli import attach, bench, build, demo, fuzz, inspect, opt, probe, run

    p = argparse.ArgumentParser(
        prog="capsule", description="Run ordinary programs inside the Linux kernel as eBPF."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (inspect, demo, build, run, attach, opt, bench, fuzz, probe):
        group.add_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # imports every command's module: Ctrl-C may come here too
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        return report(e)


def report(e: Exception) -> int:
    """Print ``e`` as ``errors()`` says and return its exit status (re-raise it when it is in no row)."""
    error, subject = e, ""
    while isinstance(error, Failure):
        subject += f"{error.subject}: "
        error = error.error
    if isinstance(error, BrokenPipeError):  # e.g. `capsule disasm x.o | head`
        sys.stderr.close()
        return 0
    for classes, status, hint in errors():
        if isinstance(error, classes):
            print(f"capsule: {subject}{error}{hint}", file=sys.stderr)
            return status
    if error is e:
        raise e
    raise error from None
