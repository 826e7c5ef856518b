"""Functions past the 16-bit limits of BPF offsets (issue 16.3): thousands of locals and a deep operand stack
(frame offsets beyond 32 KiB), and far conditional jumps inside one function; each computes what wasmtime
computes, in both memory modes."""

from __future__ import annotations

import pytest
import wasmtime

from capsule.bpf.elf import ObjectSpec
from capsule.compiler import CompileError, Options, compile_module
from capsule.runtime import Instance
from capsule.wasm import load
from tests.wasm.wasm_build import wat

pytestmark = pytest.mark.requires_bpf

LOCALS = 5000
DEPTH = 2000
BRANCHES = 3000


def _module() -> bytes:
    sets = " ".join(f"(local.set {i + 1} (i32.add (local.get 0) (i32.const {i})))" for i in range(LOCALS))
    fold = "(local.get 1)"
    for i in range(2, LOCALS + 1):
        fold = f"({'i32.add' if i % 2 else 'i32.xor'} {fold} (local.get {i}))"
    deep = " ".join(f"(i32.add (local.get 0) (i32.const {k}))" for k in range(DEPTH)) + " i32.add" * (DEPTH - 1)
    # a conditional branch over 36,000 BPF instructions of straight-line code (one multiplication each), beyond
    # the 16-bit offset of a conditional jump
    far = "(block (br_if 0 (i32.eqz (local.get 0)))" + " (local.set 0 (i32.mul (local.get 0) (i32.const 3)))" * \
        BRANCHES * 12 + ") (local.get 0)"
    return wat(f"""(module
      (func (export "many") (param i32) (result i32) (local {' '.join(['i32'] * LOCALS)}) {sets} {fold})
      (func (export "deep") (param i32) (result i32) {deep})
      (func (export "far") (param i32) (result i32) {far}))""")


@pytest.fixture(scope="module")
def module() -> bytes:
    return _module()


@pytest.mark.parametrize("checked", [True, False])
def test_large_functions_agree_with_wasmtime(module: bytes, checked: bool) -> None:
    store = wasmtime.Store()
    ref = wasmtime.Instance(store, wasmtime.Module(store.engine, module), []).exports(store)
    spec = compile_module(load(module), Options(checked=checked))
    assert any(i.is_gotol for i in spec.programs["capsule_run"].insns)  # the far branch took the long form
    with Instance(spec) as inst:
        for name in ("many", "deep", "far"):
            for x in (0, 5, -3, 1 << 30):
                assert inst.call(name, x) == [ref[name](store, x)], (name, x)


def test_a_function_beyond_every_limit_is_refused_by_name() -> None:
    """One function whose code is more than a program may hold: the build fails in one line that names the
    function and the limit (issue 12), not with a traceback from deep inside or a verifier error at load."""
    body = " (i32.store (local.get 0) (local.get 0))" * 250_000  # ~6 instructions each, bounds-checked
    module = wat(f'(module (memory 1) (func $enormous (export "enormous") (param i32) (result i32) {body} '
                 '(local.get 0)))')
    with pytest.raises(CompileError, match=r"more than the kernel's 1,000,000: function enormous alone"):
        compile_module(load(module), Options())


def _agree_with_wasmtime(module: bytes, export: str, spec: ObjectSpec) -> None:
    store = wasmtime.Store()
    ref = wasmtime.Instance(store, wasmtime.Module(store.engine, module), []).exports(store)[export]
    with Instance(spec) as inst:
        for x in (0, 5, 12345, -7, 1 << 30):
            assert inst.call(export, x) == [ref(store, x)], x


DIAMONDS = 18_500


def _diamonds_reference(x: int) -> int:
    """What the diamonds compute, in Python with wasm's i32 arithmetic (wasmtime takes over a minute to
    compile this one function, so the reference is the program's meaning, written out)."""
    acc = x & 0xFFFFFFFF
    for i in range(DIAMONDS):
        acc = (acc * 3 + i) & 0xFFFFFFFF if acc & (1 << (i % 13)) else acc ^ ((x + i * 7) & 0xFFFFFFFF)
    return acc - (1 << 32) if acc >> 31 else acc


def test_a_200000_instruction_function_of_branches_runs() -> None:
    """18,500 if/else diamonds in one function: over 200,000 BPF instructions and more conditional jumps on one
    path than the verifier keeps pending (8,192). The function is cut into regions every few thousand
    branches (``function.SPLIT_BRANCHES``) at points no forward jump crosses (issue 12)."""
    diamonds = " ".join(
        f"(if (i32.and (local.get 1) (i32.const {1 << (i % 13)})) "
        f"(then (local.set 1 (i32.add (i32.mul (local.get 1) (i32.const 3)) (i32.const {i})))) "
        f"(else (local.set 1 (i32.xor (local.get 1) (i32.add (local.get 0) (i32.const {i * 7}))))))"
        for i in range(DIAMONDS))
    module = wat(f'(module (func (export "big") (param i32) (result i32) (local i32) '
                 f'(local.set 1 (local.get 0)) {diamonds} (local.get 1)))')
    spec = compile_module(load(module), Options())
    assert sum(i.slots() for i in spec.programs["capsule_run"].insns) > 200_000
    with Instance(spec) as inst:
        for x in (0, 5, 12345, -7, 1 << 30):
            assert inst.call("big", x) == [_diamonds_reference(x)], x


def test_5000_functions_run() -> None:
    """5,000 functions calling each other as a binary tree (each calls its two children): packed into physical
    functions and programs, the calls direct, nested or through the dispatcher; results equal wasmtime's."""
    n = 5000
    funcs = []
    for i in range(n):
        a, b = 2 * i + 1, 2 * i + 2
        funcs.append(
            f"(func $f{i} (param i32) (result i32) (i32.add (call $f{a} (i32.add (local.get 0) (i32.const 1))) "
            f"(i32.mul (call $f{b} (local.get 0)) (i32.const {i % 5 + 1}))))" if b < n else
            f"(func $f{i} (param i32) (result i32) (i32.add (local.get 0) (i32.const {i})))")
    module = wat(f'(module {" ".join(funcs)} (export "run" (func $f0)))')
    _agree_with_wasmtime(module, "run", compile_module(load(module), Options()))
