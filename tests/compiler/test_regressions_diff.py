"""Regression tests for compiler bugs found by the differential suite (each names the fix it guards).

Every program runs under wasmtime and in the kernel through ``diff_harness.Pair``, in both memory profiles
where the bug was profile-specific.
"""

from __future__ import annotations

import pytest

from capsule.compiler import Options

from .diff_harness import Pair, bpf_fds

pytestmark = pytest.mark.requires_bpf

# memory.address(): a load whose address sits deep in the operand stack (slot >= 7, homed in the frame) was
# read into T1, which checked mode then overwrote with the memory limit: the load read at the limit instead.
# Here the table index of a 12-argument call_indirect is loaded at operand height 12.
DEEP_LOAD = """
typedef long long i64;
__attribute__((noinline)) i64 m12(int a, i64 b, int c, i64 d, int e, i64 f, int g, i64 h, int i, i64 j, int k,
                                  i64 l) { return a + b * 2 + c + d * 3 + e + f + g + h + i + j + k * 5 + l; }
typedef i64 (*f12)(int, i64, int, i64, int, i64, int, i64, int, i64, int, i64);
static volatile f12 via = m12;
static volatile int cells[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
i64 deep_index(int x) { return via(x, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11); }
/* eight live values, then a load at operand height 8 */
int deep_load(int x) {
    return cells[x & 15] + cells[(x + 1) & 15] * 2 + cells[(x + 2) & 15] * 3 + cells[(x + 3) & 15] * 4
         + (cells[(x + 4) & 15] * 5 + (cells[(x + 5) & 15] * 6 + (cells[(x + 6) & 15] * 7
         + (cells[(x + 7) & 15] * 8 + cells[(x + 8) & 15] * 9))));
}
"""


@pytest.mark.parametrize("checked", [True, False])
def test_load_address_deep_in_operand_stack(checked: bool) -> None:
    before = bpf_fds()
    with Pair("deep_load", Options(checked=checked), source=DEEP_LOAD) as p:
        for x in (0, 1, 100, -7):
            p.value("deep_index", x)
            p.value("deep_load", x)
    assert bpf_fds() == before


# runtime.instance: the C shadow stacks of fibers 1.. were reserved at instantiation as extra linear-memory
# pages, so memory.size answered more pages than wasm says (14 instead of 2). They are now grown when a fiber
# other than 0 first runs.
SHADOW_STACK = """
__attribute__((noinline)) static int sum(volatile int *v, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s;
}
int pages(void) { return (int)__builtin_wasm_memory_size(0); }
int on_stack(int n) {
    volatile int v[64];  /* address-taken: lives on the C shadow stack */
    for (int i = 0; i < 64; i++) v[i] = i * n;
    return sum(v, 64) + pages() * 0;
}
"""


def test_memory_size_not_inflated_by_fiber_stacks() -> None:
    with Pair("shadow_stack", source=SHADOW_STACK) as p:
        start = p.value("pages")
        want = p.value("on_stack", 3)
        inst = p.kernel.instance
        assert inst.call("on_stack", 3, fiber=1) == [want]
        assert inst.call("on_stack", 3, fiber=2) == [want]
        # each further fiber grew memory by its C stack; fiber 0 is unaffected
        assert inst.call("pages")[0] > start
        assert inst.call("on_stack", 3) == [want]


# function.stubs_suspend / dispatcher: a may_goto that fires in a region zeroes the invocation's budget so the
# dispatcher stops; the dispatcher then reported the whole budget (2^62) as transitions run. The budget left
# is # now kept in FIBER_RUN_COUNT and subtracted.
def test_transitions_counted_when_may_goto_ends_an_invocation() -> None:
    with Pair("loop") as p:
        stats = p.stats
        p.value("spin", 3 * 10**8, 5)  # ~0.7 s in the kernel: may_goto ends at least one invocation
        assert stats.invocations > 1
        assert 0 < stats.transitions < 1000
