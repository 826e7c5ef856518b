"""Liveness of locals (``compiler.liveness``): exact sets on small functions of every control construct, and
in the kernel, code that saves, reloads and zeroes only live register locals still computing what wasmtime
computes (a dead local must never be relied on; a live one never lost across a call or a loop)."""

from __future__ import annotations

import pytest

from capsule.compiler import Options, compile_module
from capsule.compiler.liveness import liveness
from capsule.wasm import Op, load
from tests.wasm.wasm_build import wat

from .diff_harness import Pair, build_source


def _func(text: str):  # type: ignore[no-untyped-def]
    m = load(wat(f"(module {text})"))
    return m.funcs[0]


def _at(func, op: int, k: int = 0) -> int:  # type: ignore[no-untyped-def]
    """The index of the k-th instruction ``op`` in the body."""
    return [i for i, ins in enumerate(func.body) if ins.op == op][k]


def test_straight_line_reads_and_writes() -> None:
    f = _func("""(func (param i32) (result i32) (local i32 i32)
        local.get 0 local.set 1     ;; 1 written before read: dead at entry
        local.get 1 local.get 2 i32.add)""")  # 2 never written: live (read as zero) from the entry
    live = liveness(f)
    assert live.before[0] == 0b101
    set1 = _at(f, Op.LOCAL_SET)
    assert live.after(set1) == 0b110  # 0 is not read again


def test_if_else_joins_both_arms() -> None:
    f = _func("""(func (param i32) (result i32) (local i32 i32)
        local.get 0
        if (result i32) local.get 1 else local.get 2 end)""")
    live = liveness(f)
    assert live.before[0] == 0b111
    assert live.before[_at(f, Op.IF)] == 0b110  # after the condition is read: either arm's local


def test_if_without_else_keeps_what_follows() -> None:
    f = _func("""(func (param i32) (result i32) (local i32)
        local.get 0 if i32.const 5 local.set 1 end
        local.get 1)""")
    live = liveness(f)
    # the false edge reads local 1 (still zero), so it is live at the entry
    assert live.before[0] == 0b11


def test_loop_carried_and_loop_local() -> None:
    f = _func("""(func (param i32) (result i32) (local i32 i32)
        loop
          local.get 0 local.set 2          ;; 2 is written first in every iteration: dead at the head
          local.get 1 local.get 2 i32.add local.set 1
          local.get 0 i32.const 1 i32.sub local.tee 0
          br_if 0
        end
        local.get 1)""")
    live = liveness(f)
    head = _at(f, Op.LOOP)
    assert live.before[head] == 0b011  # 0 and 1 are carried around; 2 is not
    assert live.before[0] == 0b011


def test_branches_out_of_nested_blocks_and_return() -> None:
    f = _func("""(func (param i32) (result i32) (local i32 i32)
        block
          block
            local.get 0 br_table 0 1 1
          end
          local.get 1 return
        end
        local.get 2)""")
    live = liveness(f)
    assert live.before[0] == 0b111
    assert live.before[_at(f, Op.RETURN)] == 0  # nothing is read after a return


def test_loop_fixed_point_needs_the_back_edge() -> None:
    """Local 2 is read at the top of the loop and written at its bottom: live at the head only through the
    back-edge, which one backward walk cannot see."""
    f = _func("""(func (param i32) (result i32) (local i32 i32)
        loop
          local.get 2 local.set 1
          local.get 0 local.set 2
          local.get 0 i32.const 1 i32.sub local.tee 0
          br_if 0
        end
        local.get 1)""")
    assert liveness(f).before[_at(f, Op.LOOP)] == 0b101



SOURCE = r"""
__attribute__((noinline)) static int twice(int x) { return x * 2 + 1; }
__attribute__((noinline)) static int id(int x) { return x; }

/* many locals across calls and loops: some dead at each call, some carried */
__attribute__((noinline)) int mix(int n) {
    int a = 0, b = 1, c = n, t;
    for (int i = 0; i < n; i++) {
        t = twice(i);            /* t dead at the next call: written again before read */
        a += t;
        b = b * 3 + id(c);       /* c live across the call, never written in the loop */
        if (i & 1) { int u = id(a); a = u - 1; }
    }
    return a ^ b ^ c;
}

/* a local read before any write on one path: its zero must be there */
__attribute__((noinline)) int maybe(int n) {
    volatile int sink = 0;
    int x;
    if (n > 3) x = twice(n);
    else __asm__("" : "=r"(x) : "0"(0));
    sink = x;
    return sink + id(n);
}
"""


@pytest.mark.requires_bpf
def test_kernel_agrees_with_dead_locals_skipped() -> None:
    wasm = build_source(SOURCE, "liveness", ["-fno-inline"])
    compile_module(load(wasm), Options(inline=False))  # compiles (the verifier below loads it)
    with Pair("liveness", Options(inline=False), ["-fno-inline"], source=SOURCE) as p:
        for n in (0, 1, 2, 7, 100, 1000):
            p.value("mix", n)
        for n in (0, 3, 4, 50):
            p.value("maybe", n)


# The back-edge of an endless loop saved the register locals live *after* its ``br`` (unreachable code) in the
# stub that suspends it; resumed from the dispatcher, the loop's head had reloaded only what is live there, so
# the verifier refused the store of a register never set on that path ("R7 !read_ok", csmith seed 25, fast).
ENDLESS = """(module (global $g (mut i32) (i32.const 0))
  (func (export "f") (param i32) (result i32) (local i32)
    (local.set 1 (i32.add (local.get 0) (i32.const 1)))
    (local.set 1 (i32.mul (local.get 1) (local.get 1)))
    (if (i32.eq (local.get 0) (i32.const 77))
      (then (loop $l (global.set $g (i32.const 1)) (br $l))))
    (local.get 1)))"""


@pytest.mark.requires_bpf
@pytest.mark.parametrize("checked", [True, False])
def test_endless_loop_saves_only_what_its_head_needs(checked: bool) -> None:
    from capsule.runtime import Instance, Pending

    m = load(wat(ENDLESS))
    assert 1 in values_register_plan(m.funcs[0])
    with Instance(compile_module(m, Options(checked=checked))) as inst:
        assert inst.call("f", 5) == [36]
        res = inst.start(inst.export_index("f"), [77], budget=3)
        for _ in range(3):  # it loops for ever, suspending and resuming at its head
            assert isinstance(res, Pending)
            res = inst.resume(res.token, budget=3)
        inst.reset(0)
        assert inst.call("f", 6) == [49]


def values_register_plan(func) -> dict[int, object]:  # type: ignore[no-untyped-def]
    from capsule.compiler.values import register_plan

    return dict(register_plan(func)[0])


# A loop's back-edges share one latch (``Ctl.latch``); its suspend stub saved what was live at the *first*
# back-edge, a ``br_if`` whose fall-through reads local 2. The second back-edge, on a path that never sets
# local 2, jumped to that stub: the verifier refused the store of a register never set ("R5 !read_ok" in
# printf_core and luaV_execute). A suspension now saves exactly what the head needs.
TWO_BACK_EDGES = """(module
  (func (export "f") (param i32) (result i32) (local i32 i32)
    (loop $l
      (local.set 0 (i32.sub (local.get 0) (i32.const 1)))
      (if (i32.and (local.get 0) (i32.const 1))
        (then
          (local.set 2 (i32.mul (local.get 0) (i32.const 3)))
          (br_if $l (i32.gt_s (local.get 0) (i32.const 0)))
          (local.set 1 (i32.add (local.get 1) (local.get 2))))
        (else
          (local.set 1 (i32.add (local.get 1) (i32.const 1)))
          (br_if $l (i32.gt_s (local.get 0) (i32.const 0))))))
    (local.get 1)))"""


def _two_back_edges(n: int) -> int:
    acc = 0
    while True:
        n = (n - 1) & 0xFFFFFFFF
        s = n - (1 << 32) if n >> 31 else n
        if n & 1:
            x = (n * 3) & 0xFFFFFFFF
            if s > 0:
                continue
            return (acc + x) & 0xFFFFFFFF
        acc += 1
        if s > 0:
            continue
        return acc & 0xFFFFFFFF


@pytest.mark.requires_bpf
@pytest.mark.parametrize("checked", [True, False])
def test_back_edges_sharing_a_latch_save_what_the_head_needs(checked: bool) -> None:
    from capsule.runtime import Instance

    m = load(wat(TWO_BACK_EDGES))
    assert 2 in values_register_plan(m.funcs[0])
    with Instance(compile_module(m, Options(checked=checked))) as inst:
        for n in (1, 2, 5, 10, 1000):
            assert inst.call("f", n) == [_two_back_edges(n)], n
