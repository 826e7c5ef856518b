"""f32/f64 arithmetic, rounding to integral values, min/max and comparisons: the kernel vs wasmtime, bit for bit.

Each function gets every pair (or every value) of the edge classes plus structured random inputs: about 200k
operations in all by default; CAPSULE_SOFTFLOAT_N=<ops per function> turns this into a soak run.
"""

from __future__ import annotations

import zlib

import pytest

from tests.softfloat.diff import compare
from tests.softfloat.inputs import SOAK_N
from tests.softfloat.reference import BINARY, COMPARE, UNARY

pytestmark = pytest.mark.requires_bpf

FUNCS = [f"capsule_{t}_{op}" for t in ("f32", "f64") for op in BINARY + UNARY + COMPARE]
PER_FUNC = SOAK_N or 6000


@pytest.mark.parametrize("name", FUNCS)
def test_matches_wasmtime(klib, wref, name: str) -> None:
    n, bad = compare(klib, wref, name, PER_FUNC, seed=zlib.crc32(name.encode()))
    assert n >= PER_FUNC
    assert not bad, "\n".join(bad)
