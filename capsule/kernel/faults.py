"""A test hook in the bpf(2) layer: make the Nth call fail with a chosen errno, and record every call's site.

Every bpf(2) call capsule makes goes through ``sys._syscall``; ``inject`` stands in for it for the length of a
``with`` block. Counting the calls of an operation once (``inject()`` with no fault) and then failing each of them
in turn (``inject(at=n, err=...)``) drives the operation down every error path it has, which is how the tests
prove that each one gives a clean error and releases what was already created (as libbpf and cilium/ebpf
promise). A call's *site* is the capsule function outside ``sys.py`` that made it, with the command, so a test
can tell which paths it reached.
"""

from __future__ import annotations

import ctypes
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import sys as kernel_sys
from .consts import Cmd

_KERNEL_DIR = Path(__file__).resolve().parent
_SYS_FILE = str(_KERNEL_DIR / "sys.py")
_SELF_FILE = str(Path(__file__).resolve())


@dataclass
class Faults:
    """What ``inject`` did: every call's (command, site), and whether the fault fired."""

    at: int | None  # the 1-based call to fail, None: fail nothing, only count
    err: int
    calls: list[tuple[str, str]] = field(default_factory=list)
    fired: tuple[str, str] | None = None

    @property
    def count(self) -> int:
        return len(self.calls)


def _site() -> str:
    """The innermost frame outside sys.py and this module: ``kernel/maps.py:create`` for a map creation."""
    for frame in reversed(traceback.extract_stack(sys._getframe(2), limit=8)):
        if frame.filename not in (_SYS_FILE, _SELF_FILE):
            where = Path(frame.filename)
            short = where.relative_to(_KERNEL_DIR.parent) if where.is_relative_to(_KERNEL_DIR.parent) else where.name
            return f"{short}:{frame.name}"
    return "?"


def _command(cmd: int) -> str:
    try:
        return Cmd(cmd).name
    except ValueError:
        return str(cmd)


@contextmanager
def inject(at: int | None = None, err: int = 0) -> Iterator[Faults]:
    """Within the block, bpf(2) call number ``at`` (counting from 1) fails with ``err`` instead of reaching the
    kernel; every call is recorded in the yielded ``Faults``. Not thread-safe: for tests."""
    faults = Faults(at, err)
    real: Callable[[int, int, object, int], int] = kernel_sys._syscall

    def call(nr: int, cmd: int, attr: object, size: int) -> int:
        faults.calls.append((_command(cmd), _site()))
        if faults.at is not None and len(faults.calls) == faults.at:
            faults.fired = faults.calls[-1]
            ctypes.set_errno(faults.err)
            return -1
        return real(nr, cmd, attr, size)

    kernel_sys._syscall = call  # type: ignore[assignment]  # a Python stand-in for the ctypes function
    try:
        yield faults
    finally:
        kernel_sys._syscall = real  # type: ignore[assignment]
