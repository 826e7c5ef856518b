"""Inputs for the differential tests: every edge class, crossed pairwise, plus structured random bit patterns.

Random inputs are drawn so that the interesting cases are common: exponents near the edges (subnormal, around
1, huge), mantissas with few bits set or many trailing zeros (exact results and exact ties), pairs with close
exponents (cancellation in add/sub), NaNs with payloads of both signs, integers around powers of two.
"""

from __future__ import annotations

import os

import numpy as np

SOAK_N = int(os.environ.get("CAPSULE_SOFTFLOAT_N", "0"))  # ops per function in a soak run (0: default size)


def _f64_edges() -> list[int]:
    e = [
        0, 1, 2, 3, 0x000FFFFFFFFFFFFF, 0x0008000000000000, 0x0010000000000000, 0x0010000000000001,
        0x001FFFFFFFFFFFFF, 0x3FE0000000000000, 0x3FE0000000000001, 0x3FDFFFFFFFFFFFFF, 0x3FF0000000000000,
        0x3FF0000000000001, 0x3FF8000000000000, 0x4004000000000000, 0x400C000000000000, 0x4000000000000000,
        0x4330000000000000, 0x4330000000000001, 0x432FFFFFFFFFFFFF, 0x4338000000000000, 0x7FEFFFFFFFFFFFFF,
        0x7FE0000000000000, 0x7FF0000000000000, 0x7FF8000000000000, 0x7FF8000000000001, 0x7FF0000000000001,
        0x7FF4000000000000, 0x7FFFFFFFFFFFFFFF, 0x3CA0000000000000, 0x3C90000000000000, 0x4340000000000000,
        # integer boundaries: 2^31, 2^32, 2^63, 2^64 and neighbours
        0x41E0000000000000, 0x41DFFFFFFFFFFFFF, 0x41DFFFFFFFC00000, 0x41E0000000100000, 0x41F0000000000000,
        0x41EFFFFFFFFFFFFF, 0x41EFFFFFFFE00000, 0x43E0000000000000, 0x43DFFFFFFFFFFFFF, 0x43F0000000000000,
        0x43EFFFFFFFFFFFFF, 0x41E0000000200000, 0x3FEFFFFFFFFFFFFF, 0xBFEFFFFFFFFFFFFF,
        0x36A0000000000000, 0x3810000000000000, 0x380FFFFFE0000000, 0x47EFFFFFE0000000, 0x47EFFFFFF0000000,
        0x47F0000000000000, 0x36A0000000000001, 0x3690000000000000, 0x3690000000000001,
    ]
    return sorted(set(e + [x | (1 << 63) for x in e]))


def _f32_edges() -> list[int]:
    e = [
        0, 1, 2, 3, 0x007FFFFF, 0x00400000, 0x00800000, 0x00800001, 0x00FFFFFF, 0x3F000000, 0x3F000001,
        0x3EFFFFFF, 0x3F800000, 0x3F800001, 0x3FC00000, 0x40200000, 0x40600000, 0x40000000, 0x4B000000,
        0x4B000001, 0x4AFFFFFF, 0x4B400000, 0x7F7FFFFF, 0x7F000000, 0x7F800000, 0x7FC00000, 0x7FC00001,
        0x7F800001, 0x7FA00000, 0x7FFFFFFF, 0x33800000, 0x33000000, 0x4B800000, 0x4F000000, 0x4EFFFFFF,
        0x4F800000, 0x4F7FFFFF, 0x5F000000, 0x5EFFFFFF, 0x5F800000, 0x5F7FFFFF, 0x3F7FFFFF,
    ]
    return sorted(set(e + [x | (1 << 31) for x in e]))


def _int_edges(width: int) -> list[int]:
    out = {0, 1, 2, 3, (1 << width) - 1, (1 << width) - 2}
    for p in range(1, width):
        for d in (-3, -2, -1, 0, 1, 2, 3):
            out.add(((1 << p) + d) & ((1 << width) - 1))
            out.add((-((1 << p) + d)) & ((1 << width) - 1))
    # ties when rounding to 24/53 bits: an odd/even significand followed by exactly half
    for top in range(60, 24, -1):
        for sig in (0x800001, 0x800002, 0x1FFFFFFFFFFFFF, 0x10000000000001):
            for half in (0, 1, -1):
                shift = top - sig.bit_length()
                if 0 < shift < width:
                    v = (sig << shift) + ((1 << (shift - 1)) + half if shift >= 1 else 0)
                    if v < 1 << width:
                        out.add(v)
                        out.add((-v) & ((1 << width) - 1))
    return sorted(out)


EDGES = {"f64": _f64_edges(), "f32": _f32_edges(), "i32": _int_edges(32), "i64": _int_edges(64)}
WIDTH = {"f64": 64, "f32": 32, "i32": 32, "i64": 64}


def random_values(t: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n structured random bit patterns of type t (uint64, zero-extended for 32-bit types)."""
    bits = WIDTH[t]
    raw = rng.integers(0, 1 << 63, size=n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, np.uint64)
    if t in ("i32", "i64"):
        # log-uniform magnitudes: every power of two equally likely, with random low bits or trailing zeros
        sh = rng.integers(0, bits, size=n, dtype=np.uint64)
        v = raw >> (np.uint64(64) - np.uint64(bits)) >> sh
        tz = rng.integers(0, bits, size=n, dtype=np.uint64) * (rng.random(n) < 0.3)
        v = (v >> tz) << tz
        neg = rng.random(n) < 0.5
        mask = np.uint64((1 << bits) - 1)
        return np.where(neg, (~v + np.uint64(1)) & mask, v & mask)
    mbits, ebits = (52, 11) if t == "f64" else (23, 8)
    emax = (1 << ebits) - 1
    bias = emax >> 1
    kind = rng.integers(0, 6, size=n)
    exp = rng.integers(0, emax + 1, size=n)
    near = rng.choice(np.array([0, 1, 2, bias - 2, bias - 1, bias, bias + 1, bias + mbits, emax - 1, emax]), n)
    exp = np.where(kind < 2, near + rng.integers(-2, 3, size=n), exp) % (emax + 1)
    frac = raw & np.uint64((1 << mbits) - 1)
    tz = rng.integers(0, mbits + 1, size=n, dtype=np.uint64)
    frac = np.where(kind == 2, (frac >> tz) << tz, frac)  # trailing zeros: exact results and ties
    frac = np.where(kind == 3, frac >> tz, frac)  # leading zeros
    sign = rng.integers(0, 2, size=n, dtype=np.uint64) << np.uint64(bits - 1)
    out = sign | (exp.astype(np.uint64) << np.uint64(mbits)) | frac
    return out


def values(t: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The edge values, then random values up to n."""
    e = np.array(EDGES[t], dtype=np.uint64)
    return np.concatenate([e, random_values(t, max(0, n - len(e)), rng)])


def pairs(t: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, then random pairs (a third with b close to a) up to n pairs."""
    e = np.array(EDGES[t], dtype=np.uint64)
    a, b = np.repeat(e, len(e)), np.tile(e, len(e))
    k = max(0, n - len(a))
    ra, rb = random_values(t, k, rng), random_values(t, k, rng)
    # b near a: same bits with a nudged exponent and low mantissa bits (cancellation, ties, close quotients)
    close = rng.random(k) < 0.35
    mbits = 52 if t == "f64" else 23
    nudge = (rng.integers(-3, 4, size=k).astype(np.int64) << mbits) + rng.integers(-4, 5, size=k)
    rb = np.where(close, (ra.astype(np.int64) + nudge).astype(np.uint64), rb)
    flip = rng.random(k) < 0.5
    rb = np.where(close & flip, rb ^ np.uint64(1 << (WIDTH[t] - 1)), rb)
    rb &= np.uint64((1 << WIDTH[t]) - 1)
    return np.concatenate([a, ra]), np.concatenate([b, rb])
