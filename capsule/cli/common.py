"""What several commands share: reading an object, the C/C++ flags and code-generation options, integer
arguments, the console, a long build's progress line, and the context an error is reported in (``about``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console

if TYPE_CHECKING:
    from capsule.bpf.spec import ObjectSpec
    from capsule.compiler import Options
    from capsule.toolchain.progress import BuildEvent, Progress

STAGE_VERBS = {"compile": "compiling", "link": "linking", "lower": "lowering", "verify": "verifying"}


class Failure(Exception):
    """``error``, met while a command worked on ``subject`` (a file, a program): ``capsule.cli.main`` reports it
    as ``capsule: SUBJECT: ERROR`` with the exit status its table gives ``error``."""

    def __init__(self, subject: str, error: Exception) -> None:
        super().__init__(f"{subject}: {error}")
        self.subject = subject
        self.error = error


@contextmanager
def about(subject: str) -> Iterator[None]:
    """Errors leaving the block are reported about ``subject`` (see ``Failure``)."""
    try:
        yield
    except Exception as e:
        raise Failure(subject, e) from e


def read_spec(path: str | Path) -> ObjectSpec:
    """The BPF object at ``path``; a clear error (exit status 1) when it cannot be read or parsed."""
    from capsule.bpf.elf import ObjectError, read_object

    try:
        return read_object(Path(path))
    except ObjectError as e:  # the message names the file
        raise SystemExit(f"capsule: {e}") from None


def console() -> Console:
    # rich wraps to 80 columns when not on a terminal; tables read better unwrapped in logs and pipes
    return Console() if sys.stdout.isatty() else Console(width=160)


def int_arg(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r} (use decimal, 0x hex, or a minus sign)") from None


def progress_printer(stream: TextIO | None = None) -> Progress:
    """The build's progress as one status line on a terminal (``capsule: compiling 12/80 d_main.c``), rewritten
    at each step and erased when the last step of a stage is done; nothing when ``stream`` (stderr) is not a
    terminal, so pipes and logs get only the build's own messages."""
    out = stream if stream is not None else sys.stderr

    def show(event: BuildEvent) -> None:
        verb = STAGE_VERBS.get(event.stage, event.stage)
        out.write(f"\r\x1b[Kcapsule: {verb} {event.done}/{event.total} {event.item}")
        if event.done == event.total:
            out.write("\r\x1b[K")
        out.flush()

    def quiet(event: BuildEvent) -> None:
        pass

    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    return show if tty else quiet


def positive_int(text: str) -> int:
    """An integer of at least 1 (argparse refuses anything else with this message)."""
    v = int_arg(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def add_c_flags(s: argparse.ArgumentParser) -> None:
    """-I/-D/-O/-l (and --cflag for anything else) collected in ``args.cflags`` for clang; without -O, C and C++
    are built at -O2 (``capsule.toolchain.guest.DEFAULT_OPT``)."""
    c = s.add_argument_group("C/C++ build flags (passed to clang; -O2 unless an -O is given)")
    c.add_argument("-I", dest="cflags", action="append", type=lambda v: "-I" + v, default=[], metavar="DIR")
    c.add_argument("-D", dest="cflags", action="append", type=lambda v: "-D" + v, metavar="NAME[=VALUE]")
    c.add_argument("-O", dest="cflags", action="append", type=lambda v: "-O" + v, metavar="LEVEL")
    c.add_argument("-l", dest="cflags", action="append", type=lambda v: "-l" + v, metavar="LIB")
    c.add_argument("--cflag", dest="cflags", action="append", metavar="FLAG", help="any other clang flag")


def add_build_options(s: argparse.ArgumentParser) -> None:
    """The compiler's options (``capsule.compiler.Options``), read back by ``compile_options``."""
    g = s.add_argument_group("code generation (for .wasm input)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--checked", dest="checked", action="store_true", default=True,
                      help="bounds-check memory accesses, trapping as the wasm spec says (default)")
    mode.add_argument("--fast", dest="checked", action="store_false",
                      help="no bounds checks: accesses past committed memory read 0 and drop stores")
    g.add_argument("--no-may-goto", dest="may_goto", action="store_false",
                   help="the profile for kernels without may_goto: every loop back-edge returns to the dispatcher")
    g.add_argument("--no-inline", dest="inline", action="store_false",
                   help="do not replace calls to small functions by their bodies")
    g.add_argument("--profile", default=None,
                   help="build for a kernel profile (capsule probe lists them; e.g. map-v3 for Debian 12's 6.1): "
                        "its window, loop form and instruction set")
    g.add_argument("--fibers", type=int, default=None, help="number of fibers (default 4)")
    g.add_argument("--stack-size", type=int_arg, default=None,
                   help="software stack per fiber in bytes, a power of two (default 16 MiB)")


def compile_options(args: argparse.Namespace) -> Options:
    from capsule.compiler import Options
    from capsule.kernel.profiles import NoProfile, profile

    kw: dict[str, Any] = {"checked": args.checked, "may_goto": args.may_goto, "inline": args.inline}
    if getattr(args, "profile", None):
        try:
            kw.update(profile(args.profile).build_options())
        except NoProfile as e:
            raise SystemExit(f"capsule: {e}") from None
    if args.fibers is not None:
        kw["fibers"] = args.fibers
    if args.stack_size is not None:
        kw["stack_size"] = args.stack_size
    try:
        return Options(**kw)
    except ValueError as e:
        raise SystemExit(f"capsule: {e}") from None
