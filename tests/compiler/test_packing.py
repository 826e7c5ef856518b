"""Packing regions into physical functions: a program spread over many global subprograms of similar size
still computes what wasmtime computes, calls crossing physical functions included, in both profiles."""

from __future__ import annotations

import pytest
import wasmtime

from capsule.compiler import Options, compile_module
from capsule.runtime import Instance
from capsule.wasm import load
from tests.wasm.wasm_build import compile_c

pytestmark = pytest.mark.requires_bpf


def _source(n: int) -> str:
    """n functions, each a switch over its argument that calls the next one: a chain through every function."""
    out = [f"int f{i}(int x);" for i in range(n + 1)]
    out.append(f"int f{n}(int x) {{ return x * 3 + 1; }}")
    for i in range(n):
        cases = " ".join(f"case {k}: y = x * {k + 2} + {i}; break;" for k in range(8))
        out.append(
            f"__attribute__((noinline)) int f{i}(int x) {{ int y = 0; switch (x & 7) {{ {cases} }} "
            f"return f{i + 1}((y ^ {i * 7919}) & 0xffff) + y; }}"
        )
    out.append('__attribute__((export_name("run"))) int run(int x) { return f0(x); }')
    return "\n".join(out)


@pytest.fixture(scope="module")
def wasm() -> bytes:
    return compile_c(_source(60), ["-fno-inline"])


@pytest.mark.parametrize("may_goto", [True, False])
def test_many_physical_functions_agree_with_wasmtime(wasm: bytes, may_goto: bool) -> None:
    opt = Options(phys_target=400, may_goto=may_goto, inline=False)
    spec = compile_module(load(wasm), opt)
    phys = [
        f for f in spec.programs["capsule_run"].func_infos if spec.btf.name_of(f.type_id).startswith("capsule_phys_")
    ]
    assert len(phys) >= 5
    # balanced: no physical function is more than a few times the target
    starts = sorted(f.insn_off for f in spec.programs["capsule_run"].func_infos) + [
        sum(i.slots() for i in spec.programs["capsule_run"].insns)
    ]
    sizes = {spec.btf.name_of(f.type_id): starts[starts.index(f.insn_off) + 1] - f.insn_off for f in phys}
    assert max(sizes.values()) < 4 * 400, sizes
    store = wasmtime.Store()
    ref = wasmtime.Instance(store, wasmtime.Module(store.engine, wasm), []).exports(store)["run"]
    with Instance(spec) as inst:
        for x in (0, 1, 5, 12345, -7, 2**31 - 1):
            assert inst.call("run", x) == [ref(store, x)], x
        assert inst.stats.transitions > 60  # the chain really went through the dispatcher and regions
