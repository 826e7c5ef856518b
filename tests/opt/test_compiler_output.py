"""The optimizer applied to capsule's own compiler output: a wasm module compiled to regions, optimised by the
default pipeline, is smaller and still computes what wasmtime computes on the original module (in the kernel,
through the dispatcher, with calls, loops, memory and traps)."""

from __future__ import annotations

import pytest
import wasmtime

from capsule.compiler import Options, compile_module
from capsule.opt.pipeline import count_slots, make_passes, optimize_object
from capsule.runtime import Instance
from capsule.runtime.errors import GuestTrap
from capsule.wasm import load
from tests.wasm.wasm_build import wat

pytestmark = pytest.mark.requires_bpf

WAT = r"""
(module
  (memory 1)
  (func $fib (param i32) (result i32)
    (if (result i32) (i32.lt_u (local.get 0) (i32.const 2))
      (then (local.get 0))
      (else (i32.add (call $fib (i32.sub (local.get 0) (i32.const 1)))
                     (call $fib (i32.sub (local.get 0) (i32.const 2)))))))
  (func $fill (param i32) (local i32)
    (loop $l
      (i32.store8 (local.get 1) (i32.mul (local.get 1) (i32.const 7)))
      (br_if $l (i32.lt_u (local.tee 1 (i32.add (local.get 1) (i32.const 1))) (local.get 0)))))
  (func $sum (param i32) (result i64) (local i32 i64)
    (loop $l
      (local.set 2 (i64.add (local.get 2) (i64.load8_u (local.get 1))))
      (br_if $l (i32.lt_u (local.tee 1 (i32.add (local.get 1) (i32.const 1))) (local.get 0))))
    (local.get 2))
  (func (export "run") (param i32) (result i64)
    (call $fill (i32.add (i32.and (local.get 0) (i32.const 255)) (i32.const 1)))
    (i64.add (call $sum (i32.add (i32.and (local.get 0) (i32.const 255)) (i32.const 1)))
             (i64.extend_i32_u (call $fib (i32.and (local.get 0) (i32.const 15))))))
  (func (export "load_at") (param i32) (result i32) (i32.load (local.get 0)))
)
"""


def test_optimised_compiler_output_is_smaller_and_agrees_with_wasmtime() -> None:
    data = wat(WAT)
    store = wasmtime.Store()
    exports = wasmtime.Instance(store, wasmtime.Module(store.engine, data), []).exports(store)
    spec = compile_module(load(data), Options())
    result = optimize_object(spec, make_passes())
    before = sum(count_slots(p) for p in spec.programs.values())
    after = sum(count_slots(p) for p in result.spec.programs.values())
    assert after < before, (before, after)
    with Instance(result.spec) as inst:
        for a in (0, 1, 7, 15, 200, 255, 1000, -1):
            assert inst.call("run", a) == [exports["run"](store, a)], a
        assert inst.call("load_at", 8) == [exports["load_at"](store, 8)]
        # a trap still traps, with the guest function named in the backtrace
        try:
            inst.call("load_at", 70000)
        except GuestTrap as e:
            assert "load_at" in str(e) or any("load_at" in str(f) for f in getattr(e, "backtrace", []))
        else:
            raise AssertionError("out-of-bounds load did not trap")
