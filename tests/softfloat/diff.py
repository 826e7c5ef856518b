"""Run one library function in the kernel and under wasmtime on the same inputs and report mismatches."""

from __future__ import annotations

import numpy as np

from tests.softfloat import inputs
from tests.softfloat.kernel_harness import KernelLib
from tests.softfloat.reference import WasmRef, signature


def inputs_for(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    args, _, _ = signature(name) if not name.endswith("_ok") else ([name.split("_")[1]], "", "")
    if len(args) == 2:
        return inputs.pairs(args[0], n, rng)
    a = inputs.values(args[0], n, rng)
    if args[0] in ("i32", "f32"):
        # the compiler keeps 32-bit values zero-extended, but the library must not depend on it
        junk = rng.integers(0, 1 << 32, size=len(a), dtype=np.uint64) << np.uint64(32)
        a = np.where(rng.random(len(a)) < 0.25, a | junk, a)
    return a, None


def compare(klib: KernelLib, wref: WasmRef, name: str, n: int, seed: int) -> tuple[int, list[str]]:
    """(ops run, descriptions of the first mismatches)."""
    rng = np.random.default_rng(seed)
    a, b = inputs_for(name, n, rng)
    got, want = klib.run(name, a, b), wref.run(name, a, b)
    bad = np.nonzero(got != want)[0]
    msgs = [
        f"{name}(a={int(a[i]):#x}" + (f", b={int(b[i]):#x}" if b is not None else "")
        + f") = {int(got[i]):#x}, wasmtime gives {int(want[i]):#x}"
        for i in bad[:10]
    ]
    if len(bad) > 10:
        msgs.append(f"... {len(bad)} mismatches of {len(a)}")
    return len(a), msgs
