"""The library as the compiler sees it: built once and cached, each function lifted out self-contained with a
BTF prototype, every wasm float instruction mapped, and every function cheap for the verifier."""

from __future__ import annotations

import os

import numpy as np
import pytest

from capsule.bpf.btf import BTF
from capsule.bpf.btf_types import Func, FuncProto, Linkage
from capsule.guest import softfloat
from capsule.wasm.opcodes import IMMEDIATE, op_name
from tests.softfloat.kernel_harness import KernelLib

# the verifier's budget is 1M processed instructions per program, shared by every function: a float call site
# must cost nothing there (each global function is verified once), and each function must stay small
MAX_VERIFIED = 5000


def test_build_is_cached_by_content(tmp_path) -> None:
    first = softfloat.build(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert softfloat.build(tmp_path) == first
    assert first.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary left behind


def test_every_function_is_a_self_contained_leaf() -> None:
    lib = softfloat.library()
    assert set(lib.functions) == set(softfloat.FUNCTION_NAMES)
    for f in lib.functions.values():
        assert f.insns[-1].code in (0x95, 0x05, 0x06)  # ends in exit or a jump back to it
        assert not any(i.is_call for i in f.insns), f.name
        assert 1 <= f.arity <= 2
    assert lib["capsule_f64_add"].params == ("a", "b")
    assert lib["capsule_f32_sqrt"].params == ("a",)


def test_every_wasm_float_instruction_is_mapped() -> None:
    """Every f32/f64 instruction in the wasm opcode table is a library call, a trap check, or a bit operation
    (neg/abs/copysign, loads/stores, consts, reinterprets) the compiler does inline."""
    inline = {"neg", "abs", "copysign", "load", "store", "const"}
    lib = softfloat.library()
    for code in IMMEDIATE:
        name = op_name(code)
        if not any(t in name for t in ("f32", "f64")) or "reinterpret" in name:
            continue
        if name.split(".")[1] in inline:
            continue
        assert name in softfloat.WASM_OPS, name
        assert softfloat.WASM_OPS[name] in lib
        if ".trunc_f" in name:
            assert softfloat.TRAP_CHECKS[name] in lib


def test_add_to_btf_gives_a_global_u64_prototype() -> None:
    btf = BTF()
    tid = softfloat.add_to_btf(btf, softfloat.library()["capsule_f64_mul"])
    func = btf.type_by_id(tid)
    assert isinstance(func, Func) and func.name == "capsule_f64_mul" and func.linkage == Linkage.GLOBAL
    proto = btf.type_by_id(func.type)
    assert isinstance(proto, FuncProto)
    assert [p.name for p in proto.params] == ["a", "b"]
    assert all(btf.size_of(p.type) == 8 for p in proto.params) and btf.size_of(proto.ret) == 8


@pytest.mark.requires_bpf
def test_every_function_verifies_cheaply(klib: KernelLib) -> None:
    """Load each function (inside the small harness) and bound the verifier's work."""
    costs = {}
    for name in softfloat.FUNCTION_NAMES:
        costs[name] = klib.program(name).info().verified_insns
    worst = max(costs, key=costs.get)  # type: ignore[arg-type]
    assert costs[worst] <= MAX_VERIFIED, f"{worst}: {costs[worst]} processed instructions"


@pytest.mark.requires_bpf
def test_harness_closes_every_fd() -> None:
    before = sorted(os.listdir("/proc/self/fd"))
    k = KernelLib()
    try:
        k.run("capsule_f64_add", np.array([1], np.uint64), np.array([2], np.uint64))
    finally:
        k.close()
    assert sorted(os.listdir("/proc/self/fd")) == before


@pytest.mark.requires_bpf
@pytest.mark.parametrize("bits,expect", [(0x3FF0000000000000, 0x3FF0000000000000), (0x4010000000000000, 1 << 62)])
def test_a_known_value(klib: KernelLib, bits: int, expect: int) -> None:
    assert int(klib.run("capsule_f64_sqrt", np.array([bits], np.uint64))[0]) == expect
