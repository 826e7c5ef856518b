"""The threads proposal's atomics in the kernel, against a model of what each must do: every read-modify-write
of every width at every aligned position (the neighbouring bytes untouched), compare-and-swap hitting and
missing, loads and stores, the traps (unaligned, out of bounds, wait on an unshared memory), wait/notify
on a shared memory, and the fence; in checked and fast memory modes."""

from __future__ import annotations

import random

import pytest

from capsule.compiler import Options, compile_module
from capsule.runtime import GuestTrap, Instance
from capsule.wasm import load
from tests.wasm.wasm_build import wat

pytestmark = pytest.mark.requires_bpf

OPS = ("add", "sub", "and", "or", "xor", "xchg")
WIDTHS = (("i32", "rmw", "", 4), ("i64", "rmw", "", 8), ("i32", "rmw8", "_u", 1), ("i32", "rmw16", "_u", 2),
          ("i64", "rmw8", "_u", 1), ("i64", "rmw16", "_u", 2), ("i64", "rmw32", "_u", 4))
LOADS = (("i32", "load", 4), ("i64", "load", 8), ("i32", "load8_u", 1), ("i32", "load16_u", 2),
         ("i64", "load8_u", 1), ("i64", "load16_u", 2), ("i64", "load32_u", 4))
STORES = (("i32", "store", 4), ("i64", "store", 8), ("i32", "store8", 1), ("i32", "store16", 2),
          ("i64", "store8", 1), ("i64", "store16", 2), ("i64", "store32", 4))
ALIGN = {1: 0, 2: 1, 4: 2, 8: 3}


def _name(*parts: object) -> str:
    return "_".join(str(p) for p in parts)


def _module(shared: bool) -> str:
    funcs = []
    for op in (*OPS, "cmpxchg"):
        for t, w, u, n in WIDTHS:
            params = f"(param i32 {t} {t})" if op == "cmpxchg" else f"(param i32 {t})"
            args = "(local.get 1) (local.get 2)" if op == "cmpxchg" else "(local.get 1)"
            funcs.append(f'(func (export "{_name(op, t, n)}") {params} (result {t})'
                         f" ({t}.atomic.{w}.{op}{u} offset=8 (local.get 0) {args}))")
    for t, name, n in LOADS:
        funcs.append(f'(func (export "{_name("load", t, n)}") (param i32) (result {t})'
                     f" ({t}.atomic.{name} align={n} (local.get 0)))")
    for t, name, n in STORES:
        funcs.append(f'(func (export "{_name("store", t, n)}") (param i32 {t})'
                     f" ({t}.atomic.{name} align={n} (local.get 0) (local.get 1)))")
    return f"""(module (memory 1 1 {"shared" if shared else ""})
      {chr(10).join(funcs)}
      (func (export "peek") (param i32) (result i64) (i64.load (local.get 0)))
      (func (export "poke") (param i32 i64) (i64.store (local.get 0) (local.get 1)))
      (func (export "fence") (result i32) (atomic.fence) (i32.const 7))
      (func (export "notify") (param i32 i32) (result i32) (memory.atomic.notify (local.get 0) (local.get 1)))
      (func (export "wait32") (param i32 i32) (result i32)
        (memory.atomic.wait32 (local.get 0) (local.get 1) (i64.const 1000)))
      (func (export "wait64") (param i32 i64) (result i32)
        (memory.atomic.wait64 (local.get 0) (local.get 1) (i64.const -1))))"""


@pytest.fixture(scope="module", params=["checked", "fast"])
def inst(request):
    spec = compile_module(load(wat(_module(shared=False), ["--enable-threads"])),
                          Options(checked=request.param == "checked"))
    with Instance(spec) as i:
        yield i


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _model(op: str, old: int, v: int, n: int) -> int:
    mask = (1 << (8 * n)) - 1
    return {"add": old + v, "sub": old - v, "and": old & v, "or": old | v, "xor": old ^ v, "xchg": v}[op] & mask


@pytest.mark.parametrize("op", OPS)
def test_read_modify_write(inst, op):
    rng = random.Random(op)
    for t, _, _, n in WIDTHS:
        bits = 32 if t == "i32" else 64
        for at in range(0, 8, n):  # every aligned position of the field in the word at 64 (offset=8 below)
            before = rng.getrandbits(64)
            v = rng.getrandbits(8 * n)
            inst.call("poke", 64, _signed(before, 64))
            got = inst.call(_name(op, t, n), 56 + at, _signed(v, bits))[0]
            old = before >> (8 * at) & ((1 << (8 * n)) - 1)
            assert got & ((1 << bits) - 1) == old, (t, n, at)
            want = before & ~(((1 << (8 * n)) - 1) << (8 * at)) | _model(op, old, v, n) << (8 * at)
            assert inst.call("peek", 64)[0] & (1 << 64) - 1 == want, (t, n, at)


def test_compare_and_swap_hits_and_misses(inst):
    rng = random.Random(5)
    for t, _, _, n in WIDTHS:
        bits = 32 if t == "i32" else 64
        for at in range(0, 8, n):
            before = rng.getrandbits(64)
            old = before >> (8 * at) & ((1 << (8 * n)) - 1)
            new = rng.getrandbits(8 * n)
            inst.call("poke", 64, _signed(before, 64))
            miss = old ^ 1
            assert inst.call(_name("cmpxchg", t, n), 56 + at, _signed(miss, bits), _signed(new, bits))[0] \
                & ((1 << bits) - 1) == old
            assert inst.call("peek", 64)[0] & (1 << 64) - 1 == before  # a miss writes nothing
            assert inst.call(_name("cmpxchg", t, n), 56 + at, _signed(old, bits), _signed(new, bits))[0] \
                & ((1 << bits) - 1) == old
            want = before & ~(((1 << (8 * n)) - 1) << (8 * at)) | new << (8 * at)
            assert inst.call("peek", 64)[0] & (1 << 64) - 1 == want


def test_loads_and_stores(inst):
    rng = random.Random(9)
    for (t, _, n), (_, _, _) in zip(LOADS, STORES, strict=True):
        bits = 32 if t == "i32" else 64
        for at in range(0, 8, n):
            before = rng.getrandbits(64)
            inst.call("poke", 128, _signed(before, 64))
            assert inst.call(_name("load", t, n), 128 + at)[0] & ((1 << bits) - 1) == \
                before >> (8 * at) & ((1 << (8 * n)) - 1)
            v = rng.getrandbits(8 * n)
            inst.call(_name("store", t, n), 128 + at, _signed(v, bits))
            want = before & ~(((1 << (8 * n)) - 1) << (8 * at)) | v << (8 * at)
            assert inst.call("peek", 128)[0] & (1 << 64) - 1 == want


def test_unaligned_atomics_trap(inst):
    for t, _, _, n in WIDTHS:
        if n > 1:
            with pytest.raises(GuestTrap, match="unaligned atomic"):
                inst.call(_name("add", t, n), 57, 1)
    with pytest.raises(GuestTrap, match="unaligned atomic"):
        inst.call("load_i64_8", 4)
    with pytest.raises(GuestTrap, match="unaligned atomic"):
        inst.call("store_i32_4", 2, 1)


def test_out_of_bounds_atomics_trap_in_checked_mode():
    spec = compile_module(load(wat(_module(shared=False), ["--enable-threads"])))
    with Instance(spec) as i:
        for f, args in (("add_i32_4", (65528, 1)), ("cmpxchg_i64_8", (65528, 0, 1)), ("load_i64_8", (65536,)),
                        ("store_i32_1", (70000, 1)), ("xor_i64_1", (65530, 1))):
            with pytest.raises(GuestTrap, match="out of bounds memory access"):
                i.call(f, *args)
        assert i.call("add_i32_4", 65520, 1) == [0]  # the last word in bounds


def test_fence_notify_and_wait_on_an_unshared_memory(inst):
    assert inst.call("fence") == [7]
    assert inst.call("notify", 0, 5) == [0]  # nobody can be waiting
    with pytest.raises(GuestTrap, match="expected shared memory"):
        inst.call("wait32", 0, 0)


def test_wait_on_a_shared_memory_returns_at_once():
    spec = compile_module(load(wat(_module(shared=True), ["--enable-threads"])))
    with Instance(spec) as i:
        i.call("poke", 32, 5)
        assert i.call("wait32", 32, 4) == [1]  # not-equal
        assert i.call("wait32", 32, 5) == [2]  # timed out: no BPF program may sleep
        assert i.call("wait64", 32, 5) == [2]
        with pytest.raises(GuestTrap, match="unaligned atomic"):
            i.call("wait32", 30, 0)
