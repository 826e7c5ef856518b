"""The reference: the same operations run by wasmtime (Cranelift on this x86-64 machine), over arrays in a wasm
memory laid out like the kernel harness (a[], b[], out[] of 8-byte slots), so one call computes a whole batch
with the bits untouched by Python's float conversion. The trapping checks (``*_ok``) come from an exact model
in Python here and are cross-checked against wasmtime's real traps in the tests.
"""

from __future__ import annotations

import math
import re
import struct

import numpy as np
import wasmtime

from capsule.guest import softfloat

N = 65536
A_OFF, B_OFF, OUT_OFF = 0, 8 * N, 16 * N
PAGES = (24 * N + 65535) // 65536

BINARY = "add sub mul div min max".split()
UNARY = "sqrt ceil floor trunc nearest".split()
COMPARE = "eq ne lt gt le ge".split()


def signature(name: str) -> tuple[list[str], str, str]:
    """(argument types, result type, wasm instruction) of a library function (not the *_ok checks)."""
    m = re.fullmatch(r"capsule_(f32|f64)_(\w+)", name)
    assert m, name
    t, op = m.groups()
    if op in BINARY:
        return [t, t], t, f"{t}.{op}"
    if op in UNARY:
        return [t], t, f"{t}.{op}"
    if op in COMPARE:
        return [t, t], "i32", f"{t}.{op}"
    if op in ("promote_f32", "demote_f64"):
        return [op[-3:]], t, f"{t}.{op}"
    if m2 := re.fullmatch(r"convert_(i32|i64)_([su])", op):
        return [m2[1]], t, f"{t}.{op}"
    if m2 := re.fullmatch(r"trunc_sat_(i32|i64)_([su])", op):
        return [t], m2[1], f"{m2[1]}.trunc_sat_{t}_{m2[2]}"
    raise ValueError(name)


def _load(t: str, base: int) -> str:
    addr = f"(i32.add (i32.const {base}) (local.get $o))"
    return {
        "i32": f"(i32.load {addr})",
        "i64": f"(i64.load {addr})",
        "f32": f"(f32.reinterpret_i32 (i32.load {addr}))",
        "f64": f"(f64.reinterpret_i64 (i64.load {addr}))",
    }[t]


def _to_u64(t: str, expr: str) -> str:
    return {
        "i32": f"(i64.extend_i32_u {expr})",
        "i64": expr,
        "f32": f"(i64.extend_i32_u (i32.reinterpret_f32 {expr}))",
        "f64": f"(i64.reinterpret_f64 {expr})",
    }[t]


def _batch_func(name: str) -> str:
    args, res, instr = signature(name)
    operands = " ".join(_load(t, off) for t, off in zip(args, (A_OFF, B_OFF), strict=False))
    value = _to_u64(res, f"({instr} {operands})")
    return f"""
  (func (export "{name}") (param $n i32) (local $o i32)
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $o) (i32.shl (local.get $n) (i32.const 3))))
      (i64.store (i32.add (i32.const {OUT_OFF}) (local.get $o)) {value})
      (local.set $o (i32.add (local.get $o) (i32.const 8)))
      (br $next))))"""


def _trap_func(name: str) -> str:
    """One trapping conversion on one value: (func (param i64) (result i64))."""
    t, i, s = re.fullmatch(r"capsule_(f32|f64)_trunc_(i32|i64)_([su])_ok", name).groups()  # type: ignore[union-attr]
    arg = "(f32.reinterpret_i32 (i32.wrap_i64 (local.get 0)))" if t == "f32" else "(f64.reinterpret_i64 (local.get 0))"
    value = _to_u64(i, f"({i}.trunc_{t}_{s} {arg})")
    return f'\n  (func (export "trap_{name}") (param i64) (result i64) {value})'


VALUE_FUNCS = [n for n in softfloat.FUNCTION_NAMES if not n.endswith("_ok")]
OK_FUNCS = [n for n in softfloat.FUNCTION_NAMES if n.endswith("_ok")]


class WasmRef:
    def __init__(self) -> None:
        body = "".join(_batch_func(n) for n in VALUE_FUNCS) + "".join(_trap_func(n) for n in OK_FUNCS)
        wat = f'(module (memory (export "mem") {PAGES}) {body})'
        self.store = wasmtime.Store()
        self.instance = wasmtime.Instance(self.store, wasmtime.Module(self.store.engine, wat), [])
        self.exports = self.instance.exports(self.store)
        self.mem = self.exports["mem"]

    def run(self, name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(len(a), dtype=np.uint64)
        for start in range(0, len(a), N):
            n = min(N, len(a) - start)
            self.mem.write(self.store, a[start : start + n].tobytes(), A_OFF)
            if b is not None:
                self.mem.write(self.store, b[start : start + n].tobytes(), B_OFF)
            self.exports[name](self.store, n)
            out[start : start + n] = np.frombuffer(self.mem.read(self.store, OUT_OFF, OUT_OFF + 8 * n), np.uint64)
        return out

    def trapping(self, name: str, a: int) -> int | None:
        """The trapping conversion's result for one input, or None when wasmtime traps."""
        try:
            r = self.exports[f"trap_{name}"](self.store, a - (1 << 64) if a >= 1 << 63 else a)
        except wasmtime.Trap:
            return None
        return r & ((1 << 64) - 1)


def ok_model(name: str, bits: np.ndarray) -> np.ndarray:
    """Exact Python model of the *_ok checks: not NaN and trunc(x) within the target integer range."""
    t, i, s = re.fullmatch(r"capsule_(f32|f64)_trunc_(i32|i64)_([su])_ok", name).groups()  # type: ignore[union-attr]
    width = 32 if i == "i32" else 64
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if s == "s" else (0, (1 << width) - 1)
    out = np.zeros(len(bits), dtype=np.uint64)
    for k, v in enumerate(bits.tolist()):
        x = struct.unpack("<f", struct.pack("<I", v & 0xFFFFFFFF))[0] if t == "f32" else struct.unpack(
            "<d", struct.pack("<Q", v))[0]
        if math.isnan(x) or math.isinf(x):
            continue
        out[k] = lo <= math.trunc(x) <= hi
    return out
