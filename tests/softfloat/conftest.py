"""Session fixtures: one kernel harness (programs load lazily, one per library function) and one wasmtime
reference instance, shared by every differential test and closed at the end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.softfloat.kernel_harness import KernelLib  # noqa: E402
from tests.softfloat.reference import WasmRef  # noqa: E402


@pytest.fixture(scope="session")
def klib() -> Iterator[KernelLib]:
    k = KernelLib()
    try:
        yield k
    finally:
        k.close()


@pytest.fixture(scope="session")
def wref() -> WasmRef:
    return WasmRef()
