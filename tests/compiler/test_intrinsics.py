"""capsule.* imports: yield suspends to the host and resumes, exit ends the call with a code, clock_ns reads
kernel clocks close to the host's, random gives varying bits; other imports are refused when called."""

from __future__ import annotations

import time

import pytest

from capsule.compiler import CompileError, compile_module
from capsule.runtime import GuestExit, Instance, Pending
from capsule.wasm import load
from tests.wasm.wasm_build import wat

WAT = r"""
(module
  (import "capsule" "yield" (func $yield))
  (import "capsule" "exit" (func $exit (param i32)))
  (import "capsule" "clock_ns" (func $clock (param i32) (result i64)))
  (import "capsule" "random" (func $random (result i32)))
  (memory 1)
  (func (export "count") (param i32) (result i32) (local i32)
    (loop $l
      (local.set 1 (i32.add (local.get 1) (i32.const 1)))
      (i32.store (i32.const 16) (local.get 1))
      (call $yield)
      (br_if $l (i32.lt_u (local.get 1) (local.get 0))))
    (local.get 1))
  (func (export "bye") (param i32) (result i32) (call $exit (local.get 0)) (i32.const 5))
  (func (export "now") (param i32) (result i64) (call $clock (local.get 0)))
  (func (export "rnd") (result i32) (i32.xor (call $random) (i32.const 0)))
)
"""


@pytest.fixture(scope="module")
def inst():
    with Instance(compile_module(load(wat(WAT)))) as i:
        yield i


@pytest.mark.requires_bpf
def test_yield_reaches_the_host_each_time_and_resumes(inst: Instance) -> None:
    seen: list[int] = []
    inst.on_yield = lambda i, fiber: seen.append(int.from_bytes(i.mem[16:20], "little"))
    try:
        assert inst.call("count", 4) == [4]
    finally:
        inst.on_yield = None
    assert seen == [1, 2, 3, 4]  # the guest's store before each yield is visible to the host


@pytest.mark.requires_bpf
def test_yield_is_a_pending_with_a_token(inst: Instance) -> None:
    res = inst.start(inst.export_index("count"), [2])
    assert isinstance(res, Pending) and res.yielded
    res = inst.resume(res.token)
    assert isinstance(res, Pending) and res.yielded
    assert inst.resume(res.token) == [2]


@pytest.mark.requires_bpf
def test_exit_ends_the_call_and_frees_the_fiber(inst: Instance) -> None:
    with pytest.raises(GuestExit) as e:
        inst.call("bye", -3)
    assert e.value.code == -3
    assert inst.call("count", 1) == [1]


@pytest.mark.requires_bpf
def test_clocks_agree_with_the_host(inst: Instance) -> None:
    assert abs(inst.call("now", 0)[0] - time.time_ns()) < 50_000_000
    assert abs(inst.call("now", 1)[0] - time.monotonic_ns()) < 50_000_000
    a, b = inst.call("now", 1)[0], inst.call("now", 1)[0]
    assert b >= a


@pytest.mark.requires_bpf
def test_random_varies(inst: Instance) -> None:
    assert len({inst.call("rnd")[0] for _ in range(8)}) > 1


@pytest.mark.parametrize("imp,message", [
    ('(import "env" "f" (func $f))', "no host function env.f"),
    ('(import "capsule" "nope" (func $f))', "no intrinsic capsule.nope"),
    ('(import "capsule" "yield" (func $f (param i32)))', "capsule.yield has type"),
])
def test_other_imports_are_refused_when_called(imp: str, message: str) -> None:
    call = "(call $f (i32.const 1))" if "param" in imp else "(call $f)"
    src = f'(module {imp} (func (export "g") {call}))'
    with pytest.raises(CompileError, match=message):
        compile_module(load(wat(src)))
