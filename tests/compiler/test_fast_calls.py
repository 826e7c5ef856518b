"""Calls that skip the dispatcher: a jump to a callee in the caller's own physical function (and back, for a
callee with one such caller), and a BPF call of the callee's physical function when it is lower in the
nesting order. Each must compute what wasmtime computes, charge the budget, suspend and resume correctly, and
keep the caller's view of memory right when the callee grows it."""

from __future__ import annotations

import bisect

import pytest

from capsule.compiler import Options, abi, compile_module
from capsule.compiler.meta import from_json
from capsule.runtime import Pending
from capsule.wasm import load

from .diff_harness import Pair, build_source

pytestmark = pytest.mark.requires_bpf

SOURCE = r"""
__attribute__((noinline)) static unsigned grow_one(void) { return __builtin_wasm_memory_grow(0, 1); }

__attribute__((noinline)) int grow_and_store(int v) {
    unsigned old = grow_one();
    if (old == 0xffffffffu) return -1;
    volatile int *p = (volatile int *)(old * 65536u + 65532u);   /* the last word of the new page */
    *p = v;
    return *p + (int)__builtin_wasm_memory_size(0);
}

__attribute__((noinline)) long long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static int leafish(int x) { int s = 0; for (int i = 0; i < x; i++) s += i ^ x; return s; }
__attribute__((noinline)) static int middle(int x) { return leafish(x) + leafish(x + 1); }
int top(int x) { int s = 0; for (int i = 0; i < x; i++) s += middle(i); return s; }
"""


def _calls_by_kind(spec) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """How many call sites became BPF calls of a physical function from inside one ("nested"), and how many
    jumps go from one wasm function's code to another's entry ("direct")."""
    ps = spec.programs[abi.ENTRY_PROGRAM]
    meta = from_json(spec.extra_sections[abi.META_SECTION], data_size=len(spec.extra_sections[abi.DATA_SECTION]))
    names = {fi.insn_off: spec.btf.name_of(fi.type_id) for fi in ps.func_infos}
    starts = [s for s, _ in meta.code_ranges]
    out = {"nested": 0, "direct": 0}
    slot = 0
    for ins in ps.insns:
        k = bisect.bisect_right(starts, slot) - 1
        if ins.is_call and ins.src == 1 and k >= 0:
            target = slot + ins.imm + 1
            out["nested"] += names.get(target, "").startswith("capsule_phys_")
        elif ins.code == 0x05 and k >= 0:  # ja: into another function's code range start
            target = slot + ins.off + 1
            j = bisect.bisect_right(starts, target) - 1
            out["direct"] += j != k and j >= 0 and target - starts[j] <= 1
        slot += ins.slots()
    return out


@pytest.fixture(scope="module")
def wasm() -> bytes:
    return build_source(SOURCE, "fastcalls", ["-fno-inline"])


@pytest.mark.parametrize("target,kind", [(40, "nested"), (100_000, "direct")])
def test_grow_in_callee_then_access(wasm: bytes, target: int, kind: str) -> None:
    """The callee grows memory (the first time through the host, later within pages the host backed ahead);
    the caller's bounds checks must see the new size at once."""
    opt = Options(phys_target=target, inline=False)
    assert _calls_by_kind(compile_module(load(wasm), opt))[kind] > 0
    with Pair("fastcalls", opt, ["-fno-inline"], source=SOURCE) as p:
        for v in (7, -3, 1 << 20, 5):
            p.value("grow_and_store", v)


@pytest.mark.parametrize("target", [40, 100_000])
def test_calls_agree_and_charge_the_budget(wasm: bytes, target: int) -> None:
    opt = Options(phys_target=target, inline=False)
    with Pair("fastcalls", opt, ["-fno-inline"], source=SOURCE) as p:
        for n in (0, 1, 15, 22):
            p.value("fib", n)
        for x in (0, 3, 50):
            p.value("top", x)
        inst = p.kernel.instance
        want = p.ref.call("fib", 20)
        res = inst.start(inst.export_index("fib"), [20], budget=300)
        rounds = 0
        while isinstance(res, Pending):  # each invocation stops when 300 calls are charged
            rounds += 1
            res = inst.resume(res.token, budget=300)
        assert res == want and rounds >= 10
