"""What a long build reports while it works: one event per step finished, for whoever shows progress.

A build is a sequence of stages (``compile`` one object per source, ``link`` the module; the compiler and the
loader can report theirs, ``lower`` and ``verify``, through the same callback), each with a known number of
steps. The toolchain only calls the callback; what the user sees (a status line on a terminal, nothing in a
pipe) is the command line's business (``capsule.cli.common.progress_printer``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BuildEvent:
    """Step ``done`` of ``total`` of ``stage`` finished: ``item`` (a file, a function) was built, or found in
    the cache (``cached``)."""

    stage: str
    done: int
    total: int
    item: str
    cached: bool = False


Progress = Callable[[BuildEvent], None]


def no_progress(event: BuildEvent) -> None:
    """The callback of a build nobody watches."""
