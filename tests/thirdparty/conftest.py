"""What the third-party program tests share: the ``slow`` marker, and the kernel engine as one parameter.

``slow`` marks a test that takes minutes (compiling a large program to BPF and loading it): it is deselected
unless ``CAPSULE_SLOW=1`` is in the environment, so the regular suite keeps its small sample (every program
under the wasmtime reference, and wasm3 in the kernel) and the full runs are one variable away.
``kernel_param()`` is the kernel engine as a test parameter: it needs BPF and, loading a large program, is slow.
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


def kernel_param(slow: bool = True) -> object:
    """The ``engine`` parameter for the kernel: needs BPF, and is slow unless told otherwise."""
    marks = [pytest.mark.requires_bpf, *([pytest.mark.slow] if slow else [])]
    return pytest.param("kernel", id="kernel", marks=marks)
