"""Conversions: int -> float (round to nearest even), float -> int saturating and trapping, promote/demote,
the kernel vs wasmtime bit for bit (about 200k operations by default, CAPSULE_SOFTFLOAT_N for a soak run)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tests.softfloat import inputs
from tests.softfloat.diff import compare, inputs_for
from tests.softfloat.inputs import SOAK_N
from tests.softfloat.reference import OK_FUNCS, ok_model

pytestmark = pytest.mark.requires_bpf

CONVERT = [f"capsule_{t}_convert_{i}_{s}" for t in ("f32", "f64") for i in ("i32", "i64") for s in "su"]
TRUNC_SAT = [f"capsule_{t}_trunc_sat_{i}_{s}" for t in ("f32", "f64") for i in ("i32", "i64") for s in "su"]
FUNCS = CONVERT + TRUNC_SAT + ["capsule_f64_promote_f32", "capsule_f32_demote_f64"]
PER_FUNC = SOAK_N or 8000


@pytest.mark.parametrize("name", FUNCS)
def test_matches_wasmtime(klib, wref, name: str) -> None:
    n, bad = compare(klib, wref, name, PER_FUNC, seed=zlib.crc32(name.encode()))
    assert n >= PER_FUNC
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", OK_FUNCS)
def test_trap_check_matches_model(klib, name: str) -> None:
    """The *_ok functions against an exact model (NaN, inf and trunc(x) out of range trap)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    a, _ = inputs_for(name, min(PER_FUNC, 20000), rng)
    got = klib.run(name, a)
    want = ok_model(name, a)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [f"{int(a[i]):#x}: {int(got[i])} (model {int(want[i])})" for i in bad[:10]]
    assert 0 < int(want.sum()) < len(a)  # both outcomes are exercised


@pytest.mark.parametrize("name", OK_FUNCS)
def test_trapping_form_matches_wasmtime(klib, wref, name: str) -> None:
    """Per value under wasmtime: it traps exactly when *_ok says 0, and otherwise gives the saturating value."""
    t = name.split("_")[1]
    sat = name.replace("_trunc_", "_trunc_sat_").removesuffix("_ok")
    a = np.array(inputs.EDGES[t], dtype=np.uint64)
    a = np.concatenate([a, inputs.random_values(t, 600, np.random.default_rng(7))])
    ok, value = klib.run(name, a), klib.run(sat, a)
    for x, o, v in zip(a.tolist(), ok.tolist(), value.tolist(), strict=True):
        r = wref.trapping(name, x)
        assert (r is not None) == bool(o), f"{name}({x:#x}): ok={o}, wasmtime {'traps' if r is None else r}"
        if r is not None:
            assert r == v, f"{name}({x:#x}): value {v:#x}, wasmtime {r:#x}"
