"""Regression tests for bugs the in-kernel spec suite exposed (each names the fix it guards).

Every module is a few lines of wat (``wat2wasm``), compiled in checked mode and run in the kernel.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from capsule.compiler import Options, compile_module
from capsule.runtime import GuestTrap, Instance
from capsule.runtime.instance import BACKTRACE_DEPTH
from capsule.wasm import load

pytestmark = pytest.mark.requires_bpf


def wat(tmp_path: Path, text: str) -> bytes:
    src, out = tmp_path / "m.wat", tmp_path / "m.wasm"
    src.write_text(text)
    subprocess.run(["wat2wasm", str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


def instance(tmp_path: Path, text: str, options: Options | None = None) -> Instance:
    return Instance(compile_module(load(wat(tmp_path, text)), options or Options(checked=True)))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# integers.divide (then ops.divide): ``isinstance(rb, int)`` was meant to spot a constant divisor, but registers
# are ``Reg``, an int subclass, so every signed division took the constant path and INT_MIN / -1 did not trap.
DIV = """(module
  (func (export "div32") (param i32 i32) (result i32) (i32.div_s (local.get 0) (local.get 1)))
  (func (export "rem32") (param i32 i32) (result i32) (i32.rem_s (local.get 0) (local.get 1)))
  (func (export "div64") (param i64 i64) (result i64) (i64.div_s (local.get 0) (local.get 1)))
  (func (export "rem64") (param i64 i64) (result i64) (i64.rem_s (local.get 0) (local.get 1))))"""


def test_signed_division_overflow_traps(tmp_path: Path) -> None:
    with instance(tmp_path, DIV) as inst:
        for name, low in (("div32", -(1 << 31)), ("div64", -(1 << 63))):
            with pytest.raises(GuestTrap) as e:
                inst.call(name, low, -1)
            assert e.value.message == "integer overflow"
            assert inst.call(name, low, 1) == [low]
            assert inst.call(name, -7, -1) == [7]
            assert inst.call(name, -7, 2) == [-3]
        for name, low in (("rem32", -(1 << 31)), ("rem64", -(1 << 63))):
            assert inst.call(name, low, -1) == [0]
            assert inst.call(name, -7, 2) == [-1]
            with pytest.raises(GuestTrap, match="integer divide by zero"):
                inst.call(name, 1, 0)


# function.op_br_table: a br_table with no targets but its default indexed an empty list (IndexError).
BR_TABLE_DEFAULT_ONLY = """(module
  (func (export "f") (param i32) (result i32)
    (block (result i32) (br_table 0 (i32.const 33) (local.get 0)) (i32.const 31))))"""


def test_br_table_with_only_a_default(tmp_path: Path) -> None:
    with instance(tmp_path, BR_TABLE_DEFAULT_ONLY) as inst:
        assert [inst.call("f", k)[0] for k in (0, 1, -1)] == [33, 33, 33]


# dispatcher.entry_program: the may_goto dispatcher picked the physical function from the state's low 32 bits
# instead of its low byte, so a region other than the first of a physical function ran code of another one.
MANY = "(module\n" + "".join(
    f'  (func (export "f{i}") (param i32) (result i32) (local i32)\n'
    f"    (loop (local.set 1 (i32.add (local.get 1) (i32.const {i + 1})))\n"
    f"          (br_if 0 (i32.lt_u (local.get 1) (local.get 0)))) (local.get 1))\n"
    for i in range(12)
) + ")"


@pytest.mark.parametrize("target", [60, 200, 100_000])
def test_regions_in_several_physical_functions(tmp_path: Path, target: int) -> None:
    with instance(tmp_path, MANY, Options(checked=True, phys_target=target)) as inst:
        assert [inst.call(f"f{i}", 1)[0] for i in range(12)] == [i + 1 for i in range(12)]
        assert [inst.call(f"f{i}", 100)[0] for i in range(12)] == [-(-100 // (i + 1)) * (i + 1) for i in range(12)]


# dispatcher._call_tree: a module without functions (binary.wast, memory.wast have many) made an empty
# compare tree (IndexError).
def test_module_without_functions(tmp_path: Path) -> None:
    fds = open_fds()
    with instance(tmp_path, '(module (memory 1) (global (export "g") i32 (i32.const 7)))') as inst:
        assert inst.memory_size == 65536
        assert inst.global_value("g") == 7
    assert open_fds() == fds


# instance.backtrace: a trap at the bottom of a runaway recursion walked every one of its ~500,000 frames in
# Python (two seconds per assert_exhaustion); the backtrace now lists BACKTRACE_DEPTH frames and "...".
def test_stack_exhaustion_is_fast_and_backtrace_bounded(tmp_path: Path) -> None:
    text = '(module (func $r (export "runaway") (call $r)) (func (export "ok") (result i32) (i32.const 1)))'
    with instance(tmp_path, text) as inst:
        t0 = time.perf_counter()
        with pytest.raises(GuestTrap) as e:
            inst.call("runaway")
        assert time.perf_counter() - t0 < 1.0
        assert e.value.message == "call stack exhausted"
        assert e.value.backtrace[0] == "runaway" and e.value.backtrace[-1] == "..."
        assert len(e.value.backtrace) <= BACKTRACE_DEPTH + 2
        assert inst.call("ok") == [1]  # the fiber is usable again after the trap


def test_global_value_reads_exported_globals(tmp_path: Path) -> None:
    text = """(module
      (global $a (export "a") (mut i32) (i32.const -2))
      (global (export "b") i64 (i64.const -5))
      (global (export "c") f32 (f32.const -0.0))
      (func (export "set") (param i32) (global.set $a (local.get 0))))"""
    with instance(tmp_path, text) as inst:
        assert inst.global_value("a") == 0xFFFF_FFFE
        assert inst.global_value("b") == (1 << 64) - 5
        assert inst.global_value("c") == 0x8000_0000
        inst.call("set", 9)
        assert inst.global_value("a") == 9


# memory.grow: (1) constants below the grown slot were never placed in their registers, yet those registers
# were spilled around the kfunc call (the verifier: "R4 !read_ok"); (2) when the grown slot lived in the frame
# its result register was T0, which the lowering also used as scratch, so the page arithmetic went wrong.
GROW_DEEP = """(module (memory 1 8)
  (func (export "live") (param i32 i32) (result i32)
    (i32.add (local.get 0) (i32.add (i32.mul (local.get 1) (i32.const 3)) (i32.add (i32.const 100)
      (i32.add (local.get 0) (i32.add (local.get 1) (i32.add (i32.const 1000) (i32.add (local.get 0)
        (i32.add (i32.const 10000) (memory.grow (i32.const 1)))))))))))
  (func (export "deep_fail") (result i32)
    (i32.add (i32.const 1) (i32.add (i32.const 2) (i32.add (i32.const 3) (i32.add (i32.const 4)
      (i32.add (i32.const 5) (i32.add (i32.const 6) (i32.add (i32.const 7) (i32.add (i32.const 8)
        (memory.grow (i32.const 100)))))))))))
  (func (export "size") (result i32) (memory.size)))"""


def test_memory_grow_with_live_values_and_frame_homed_result(tmp_path: Path) -> None:
    with instance(tmp_path, GROW_DEEP) as inst:
        assert inst.call("live", 1, 2) == [1 + 6 + 100 + 1 + 2 + 1000 + 1 + 10000 + 1]
        assert inst.call("live", 5, 7) == [5 + 21 + 100 + 5 + 7 + 1000 + 5 + 10000 + 2]
        assert inst.call("size") == [3]
        assert inst.call("deep_fail") == [36 - 1]  # grow past the maximum gives -1
        assert inst.call("size") == [3]
