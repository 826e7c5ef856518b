"""Packing regions into physical functions: a program spread over many global subprograms of similar size
still computes what wasmtime computes, calls crossing physical functions included, in both profiles."""

from __future__ import annotations

import bisect
import functools

import pytest
import wasmtime

from capsule.bpf.elf import ObjectSpec
from capsule.bpf.opcodes import CALL, CallKind
from capsule.compiler import Options, compile_module, packing
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


def _stack_walk(spec: ObjectSpec) -> tuple[int, int, int]:
    """(instructions, BPF calls between physical functions, instructions the kernel's stack-depth check
    scans): it walks every call path from the
    entry and scans each subprogram's instructions on every visit, with no memo."""
    ps = spec.programs["capsule_run"]
    pos, at = [], 0
    for ins in ps.insns:
        pos.append(at)
        at += ins.slots()
    starts = sorted(f.insn_off for f in ps.func_infos)
    calls: dict[int, list[int]] = {k: [] for k in range(len(starts))}
    for k, ins in enumerate(ps.insns):
        if ins.code == CALL and ins.src == CallKind.BPF:
            calls[bisect.bisect_right(starts, pos[k]) - 1].append(bisect.bisect_right(starts, pos[k] + ins.imm + 1) - 1)
    size = [b - a for a, b in zip(starts, [*starts[1:], at], strict=True)]

    @functools.cache
    def cost(k: int) -> int:
        return size[k] + sum(cost(c) for c in calls[k])

    return at, sum(len(calls[k]) for k in range(1, len(starts))), cost(0)


def _layered_source(width: int, sites: int) -> str:
    """Three layers of ``width`` functions; each calls every function of the layer below ``sites`` times."""
    out = []
    for layer in range(3):
        for i in range(width):
            body = " ".join(f"x = g{layer - 1}_{j}(x ^ {s + 1}) + {i};" for j in range(width) for s in range(sites)) \
                if layer else "for (int k = 0; k < (x & 7); k++) x = x * 31 + k;"
            out.append(f"__attribute__((noinline)) int g{layer}_{i}(int x) {{ {body} return x; }}")
    calls = " + ".join(f"g2_{i}(x)" for i in range(width))
    out.append(f'__attribute__((export_name("run"))) int run(int x) {{ return {calls}; }}')
    return "\n".join(out)


def test_nested_calls_keep_the_kernels_stack_walk_linear() -> None:
    """BPF calls between physical functions are chosen so that the kernel's stack-depth walk, which rescans a
    callee for every call instruction, stays a small multiple of the program (Lua's walked 9.2 billion
    instructions, 24,000 times its size, before the cap); the program still computes what wasmtime does."""
    wasm = compile_c(_layered_source(8, 6), ["-fno-inline"])  # uncapped: 165 times the program
    spec = compile_module(load(wasm), Options(phys_target=150, inline=False))
    insns, nested, scanned = _stack_walk(spec)
    assert nested > 0  # some calls are still BPF calls
    assert scanned <= packing.SCAN_PER_INSN * insns, (scanned, insns)
    store = wasmtime.Store()
    ref = wasmtime.Instance(store, wasmtime.Module(store.engine, wasm), []).exports(store)["run"]
    with Instance(spec) as inst:
        for x in (0, 3, 77, -5):
            assert inst.call("run", x) == [ref(store, x)], x
