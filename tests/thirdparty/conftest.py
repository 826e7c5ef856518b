"""What the third-party program tests share: the ``slow`` marker, and the kernel engine as one parameter.

``slow`` marks a test that takes minutes (compiling a large program to BPF and loading it): it is deselected
unless ``CAPSULE_SLOW=1`` is in the environment, so the regular suite keeps its small sample (every program
under the wasmtime reference) and the full runs are one variable away. A kernel run that cannot succeed until the
compiler scales is ``kernel_param(reason, raises)``: strictly expected to fail with exactly that error, so the
day it passes the test says so.
"""

from __future__ import annotations

import os

import pytest

SLOW_ENV = "CAPSULE_SLOW"  # both markers are registered in pyproject.toml


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow tests unless asked for (pytest reports them as deselected, not as skipped)."""
    if os.environ.get(SLOW_ENV) == "1":
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def kernel_param(reason: str | None = None, raises: type[BaseException] | tuple[type[BaseException], ...] | None = None,
                 slow: bool = True) -> object:
    """The ``engine`` parameter for the kernel: needs BPF, is slow, and, with a ``reason``, strictly expected to
    fail with ``raises`` (the error the program meets today)."""
    marks = [pytest.mark.requires_bpf]
    if slow:
        marks.append(pytest.mark.slow)
    if reason is not None:
        marks.append(pytest.mark.xfail(strict=True, reason=reason, raises=raises))
    return pytest.param("kernel", id="kernel", marks=marks)
