"""The ``slow`` marker of the benchmark tests: a test that compiles and loads a large program (Lua, zlib) is
deselected unless ``CAPSULE_SLOW=1`` is in the environment (the convention of ``tests/thirdparty``), so the
regular suite keeps the small programs' baselines and the full runs are one variable away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SLOW_ENV = "CAPSULE_SLOW"
HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"slow: takes minutes (a large program compiled to BPF and loaded); "
                                       f"deselected unless {SLOW_ENV}=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SLOW_ENV) == "1":
        return
    slow = [i for i in items if i.get_closest_marker("slow") is not None and HERE in Path(i.path).parents]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if i not in slow]
