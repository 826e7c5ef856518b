"""The inliner: rewritten modules stay valid and compute the same as the original (in the kernel, against
wasmtime on the original), for callees with early returns, branches to their outermost label, loops, locals
that must start at zero on every inlined call, and several parameters and results."""

from __future__ import annotations

import pytest
import wasmtime

from capsule.compiler import Options, compile_module
from capsule.compiler.inline import inline_small_functions
from capsule.runtime import Instance
from capsule.wasm import Op, load, validate
from tests.wasm.wasm_build import wat

WAT = r"""
(module
  (func $early (param i32) (result i32)
    (block (br_if 0 (i32.lt_s (local.get 0) (i32.const 0))) (return (i32.const 100)))
    (i32.const -1))
  (func $outer_label (param i32) (result i32)
    (drop (br_if 0 (i32.const 7) (local.get 0)))
    (i32.const 9))
  (func $counter (result i32) (local i32)
    (local.set 0 (i32.add (local.get 0) (i32.const 1)))
    (local.get 0))
  (func $swap (param i64 i64) (result i64 i64) (local.get 1) (local.get 0))
  (func $sum_to (param i32) (result i32) (local i32)
    (loop $l (local.set 1 (i32.add (local.get 1) (local.get 0)))
             (br_if $l (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
    (local.get 1))
  (func (export "run") (param i32) (result i64)
    (local i32 i64)
    (local.set 1 (i32.add (call $early (local.get 0)) (call $outer_label (local.get 0))))
    (local.set 1 (i32.add (local.get 1) (i32.add (call $counter) (call $counter))))
    (local.set 1 (i32.add (local.get 1) (call $sum_to (i32.add (i32.and (local.get 0) (i32.const 15)) (i32.const 1)))))
    (call $swap (i64.extend_i32_s (local.get 1)) (i64.const 1000))
    (i64.sub))
)
"""


def test_inlined_module_validates_and_removes_the_calls() -> None:
    m = load(wat(WAT))
    out, origins = inline_small_functions(m)
    assert set(origins) == {m.num_imported_funcs + len(m.funcs) - 1}
    validate(out)
    run = out.funcs[-1]
    assert not any(ins.op == Op.CALL for ins in run.body)
    assert len(run.locals) > len(m.funcs[-1].locals)


@pytest.mark.requires_bpf
def test_inlined_and_plain_agree_with_wasmtime() -> None:
    data = wat(WAT)
    store = wasmtime.Store()
    ref = wasmtime.Instance(store, wasmtime.Module(store.engine, data), []).exports(store)["run"]
    args = [0, 1, -1, 5, -300, 2**31 - 1, -(2**31), 16, 31]
    for inline in (True, False):
        with Instance(compile_module(load(data), Options(inline=inline))) as inst:
            for a in args:
                assert inst.call("run", a) == [ref(store, a)], (inline, a)
