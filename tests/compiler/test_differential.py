"""Differential tests: C programs built to wasm once, each exported function called with the same arguments
under wasmtime (the reference) and in the kernel (capsule); results, traps and memory must agree.

The programs are in ``differential/``; ``diff_harness`` builds and runs them. Every module is loaded once per
test module (a fixture), and calls go to both runtimes in the same order, so stateful programs stay in step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from capsule.compiler import Options
from capsule.ints import signed
from capsule.runtime import CallError, Pending

from .diff_harness import Pair, Trapped, bpf_fds

pytestmark = pytest.mark.requires_bpf

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
EDGE64 = [
    0,
    1,
    -1,
    2,
    -2,
    3,
    7,
    63,
    64,
    65,
    I64_MIN,
    I64_MAX,
    I64_MIN + 1,
    I32_MIN,
    I32_MAX,
    1 << 32,
    (1 << 32) - 1,
    -(1 << 32),
    0x8000_0000,
]
EDGE32 = [0, 1, -1, 2, -2, 3, 7, 31, 32, 33, I32_MIN, I32_MAX, I32_MIN + 1, 0xFFFF, -0x10000]


def rand64(rng: random.Random) -> int:
    """Random i64 with varied magnitudes (small values hit the interesting paths of division and shifts)."""
    bits = rng.choice([4, 16, 31, 32, 33, 48, 63, 64])
    v = rng.getrandbits(bits)
    v = v - (1 << 64) if v >> 63 else v
    return -v if rng.random() < 0.3 and v != I64_MIN else v


def rand32(rng: random.Random) -> int:
    v = rng.getrandbits(rng.choice([3, 8, 16, 31, 32]))
    return v - (1 << 32) if v >> 31 else (-v if rng.random() < 0.3 else v)


# Every test runs twice: as the compiler builds objects by default, and split into several BPF programs joined
# by tail calls (issue 12), with budgets so small that each program holds a handful of physical functions.
SPLIT = {"program_budget": 1, "phys_target": 200}  # one physical function per program


class Pairs(dict[tuple[str, Options | None], Pair]):
    def __init__(self, split: bool) -> None:
        super().__init__()
        self.split = split


@pytest.fixture(scope="module", params=["one-program", "split"])
def pairs(request: pytest.FixtureRequest) -> Iterator[Pairs]:
    """Loaded modules, one per (program, options), closed when the test module ends (no fd may leak). In the
    split run, the modules really are split (most into three programs or more) and states really cross
    between their programs."""
    before = bpf_fds()
    loaded = Pairs(request.param == "split")
    yield loaded
    if loaded.split:
        parts = {name: len(p.kernel.instance.programs) for (name, _), p in loaded.items()}
        # as split as each allows (a module of few functions has few physical functions to give each program)
        assert all(n >= 2 for n in parts.values()) and sum(n >= 3 for n in parts.values()) >= len(parts) // 2, parts
        assert sum(p.kernel.instance.switches for p in loaded.values()) > 0
    for p in loaded.values():
        p.close()
    loaded.clear()
    assert bpf_fds() <= before


def get(pairs: Pairs, name: str, options: Options | None = None) -> Pair:
    if pairs.split:
        options = replace(options or Options(), **SPLIT)
    key = (name, options)
    if key not in pairs:
        pairs[key] = Pair(name, options)
    return pairs[key]


# -- recursion -----------------------------------------------------------------------------------------------
def test_recursion_100000_deep(pairs) -> None:
    p = get(pairs, "recursion")
    for n in (0, 1, 10, 1000, 100_000):
        p.value("deep", n)


def test_ackermann(pairs) -> None:
    p = get(pairs, "recursion")
    for m, n in ((0, 0), (1, 5), (2, 3), (2, 10), (3, 3), (3, 5)):
        assert p.value("ack", m, n) == _ack(m, n)


def _ack(m: int, n: int) -> int:
    return {0: n + 1, 1: n + 2, 2: 2 * n + 3, 3: 2 ** (n + 3) - 3}[m]


def test_mutual_recursion(pairs) -> None:
    p = get(pairs, "recursion")
    for n in (0, 1, 2, 7, 1000, 100_001):
        assert p.value("is_even", n) == (n % 2 == 0)
        assert p.value("is_odd", n) == (n % 2 == 1)


def test_fib_and_call_tree(pairs) -> None:
    p = get(pairs, "recursion")
    for n in (0, 1, 2, 10, 20):
        p.value("fib", n)
    for depth, seed in ((0, 5), (3, -1), (10, I64_MAX), (12, 123456789)):
        p.value("tree", depth, seed)


# -- indirect calls ------------------------------------------------------------------------------------------
def test_function_pointer_tables(pairs) -> None:
    p = get(pairs, "funcptr")
    rng = random.Random(1)
    for i in range(-2, 8):
        for a, b in ((3, 4), (I32_MIN, -1), (rng.getrandbits(31), rand32(rng))):
            p.value("apply", i, a, b)
    for n, seed in ((0, 1), (10, 7), (1000, -5), (5000, I32_MAX)):
        p.value("fold", n, seed)
    for i in (0, 1, 2, 3):
        for x in (3, -7, I64_MIN, 1 << 40):
            p.value("apply64", i, x)


def test_indirect_call_traps(pairs) -> None:
    p = get(pairs, "funcptr")
    good = p.value("index_of", 0)
    assert good > 0
    assert p.value("call_raw", good, 5, 6) == 11
    out_of_table = p.check("call_raw", 100_000, 1, 2)
    assert out_of_table == Trapped("undefined element", ())
    assert p.check("call_raw", -1, 1, 2) == Trapped("undefined element", ())
    assert p.check("call_raw", 0, 1, 2) == Trapped("uninitialized element", ())
    assert p.check("call_wrong", good, 9) == Trapped("indirect call type mismatch", ())
    assert p.value("call_raw", good, 1, 2) == 3  # and the module still works after the traps


# -- arguments and structs -----------------------------------------------------------------------------------
def test_twelve_arguments(pairs) -> None:
    p = get(pairs, "args12")
    rng = random.Random(12)
    for _ in range(6):
        args = [rand32(rng) if k % 2 == 0 else rand64(rng) for k in range(12)]
        p.value("mix12", *args)
        p.value("sel12", *[rand32(rng) for _ in range(12)])
    p.value("mix12", *[I32_MIN if k % 2 == 0 else I64_MIN for k in range(12)])
    for x, y in ((0, 0), (1, -1), (I32_MAX, I64_MAX), (-77, 1 << 40)):
        p.value("drive", x, y)


def test_structs_by_value(pairs) -> None:
    p = get(pairs, "structs")
    rng = random.Random(3)
    for a, b, c in (
        (0, 0, 0),
        (1, 2, 3),
        (I32_MAX, I32_MIN, -1),
        *[(rand32(rng), rand32(rng), rand32(rng)) for _ in range(5)],
    ):
        p.value("geometry", a, b, c)
    for seed, rounds in ((0, 0), (1, 1), (-5, 17), (I64_MAX, 100), (rand64(rng), 1000)):
        p.value("chain", seed, rounds)


# -- switch-heavy code ---------------------------------------------------------------------------------------
def test_bytecode_interpreter(pairs) -> None:
    p = get(pairs, "interp")
    for arg in (0, 1, 10, 1000):
        assert p.value("interp", 0, arg, 1 << 30) == sum(i * i for i in range(arg))
    for arg in (0, 1, 2, 50, 90):
        p.value("interp", 1, arg, 1 << 30)
    for arg in (1, 27, 97, 871, 0):
        p.value("interp", 2, arg, 100_000)  # collatz steps (0 runs out of fuel)
    rng = random.Random(4)
    for arg in (0, -1, I64_MIN, I64_MAX, *[rand64(rng) for _ in range(5)]):
        p.value("interp", 3, arg, 1000)
    assert p.value("bad_opcode") == -2
    assert p.value("interp", 0, 1000, 50) == -4


# -- 64-bit arithmetic ---------------------------------------------------------------------------------------
OPS64 = [
    "mul64",
    "divs64",
    "divu64",
    "rems64",
    "remu64",
    "shl64",
    "shrs64",
    "shru64",
    "rotl64",
    "rotr64",
    "lt64",
    "wide",
]
OPS32 = ["mul32", "divs32", "divu32", "rems32", "remu32", "shl32", "shrs32", "shru32", "rotl32", "rotr32"]


def test_arith64_binary(pairs) -> None:
    p = get(pairs, "arith")
    rng = random.Random(64)
    operands = [(a, b) for a in EDGE64 for b in EDGE64] + [(rand64(rng), rand64(rng)) for _ in range(60)]
    traps = 0
    for name in OPS64:
        for a, b in operands:
            traps += isinstance(p.check(name, a, b), Trapped)
    assert traps >= 4 * len(EDGE64)  # division by zero (and INT64_MIN / -1) trapped on both sides


def test_arith64_unary(pairs) -> None:
    p = get(pairs, "arith")
    rng = random.Random(65)
    for name in ("clz64", "ctz64", "popcnt64"):
        for a in [*EDGE64, *[rand64(rng) for _ in range(40)], *[1 << k for k in range(64)]]:
            p.value(name, a)


def test_arith32(pairs) -> None:
    p = get(pairs, "arith")
    rng = random.Random(32)
    operands = [(a, b) for a in EDGE32 for b in EDGE32] + [(rand32(rng), rand32(rng)) for _ in range(60)]
    for name in OPS32:
        for a, b in operands:
            p.check(name, a, b)
    for name in ("clz32", "ctz32", "popcnt32", "ext"):
        for a in [*EDGE32, *[rand32(rng) for _ in range(40)], *[1 << k for k in range(31)]]:
            p.value(name, a)
    for a in [*EDGE64, *[rand64(rng) for _ in range(20)]]:
        p.value("wrap32", a)


def test_division_traps_named(pairs) -> None:
    p = get(pairs, "arith")
    assert p.check("divs64", 1, 0) == Trapped("integer divide by zero", ())
    assert p.check("divs64", I64_MIN, -1) == Trapped("integer overflow", ())
    assert p.check("divs32", I32_MIN, -1) == Trapped("integer overflow", ())
    assert p.value("rems64", I64_MIN, -1) == 0
    assert p.value("rems32", I32_MIN, -1) == 0


# -- loops ---------------------------------------------------------------------------------------------------
def test_loop_small(pairs) -> None:
    p = get(pairs, "loop")
    for n, seed in ((0, 1), (1, 2), (1000, -1), (1_000_000, 42)):
        p.value("spin", n, seed)
    for n, seed in ((0, 1), (1, 7), (20, 12345)):
        p.value("nested", n, seed)


def test_loop_of_a_billion_iterations(pairs) -> None:
    """10^9 iterations, in both loop profiles. With may_goto the loop stays inside one region and the guard
    (about 250 ms on this kernel) ends the invocation: the call spans several. Without may_goto every
    back-edge is a dispatcher transition, and a budget of 10^7 transitions spreads the call over many
    invocations."""
    p = get(pairs, "loop")
    want = p.ref.call("spin", 10**9, 99)
    before, transitions = p.stats.invocations, p.stats.transitions
    t0 = time.perf_counter()
    assert p.kernel.call("spin", 10**9, 99) == want
    assert time.perf_counter() - t0 < 30
    assert p.stats.invocations - before > 1, "may_goto did not cut a 10^9 loop"
    assert p.stats.transitions - transitions < 1000  # the loop ran inside its region
    q = get(pairs, "loop", Options(may_goto=False))
    before = q.stats.invocations
    assert q.kernel.call("spin", 10**9, 99, budget=10**7) == want
    assert q.stats.invocations - before > 10, "the budget did not split the call"


# -- qsort, hash table, strings ------------------------------------------------------------------------------
def test_qsort_with_comparators(pairs) -> None:
    p = get(pairs, "qsort")
    for n in (0, 1, 2, 9, 100, 5000):
        for k in (0, 1, 2):
            assert p.value("sort_ints", n, 12345 + n, k, 1000) != -1
    assert p.value("sort_ints", 20000, 7, 0, 1 << 30) != -1
    assert p.value("sort_ints", 3000, 7, 1, 3) != -1  # many equal keys
    for n in (0, 1, 50, 3000):
        p.value("sort_recs", n, 99)


def test_hash_table(pairs) -> None:
    p = get(pairs, "hashtable")
    rng = random.Random(5)
    keys = [rand64(rng) for _ in range(300)] + [0, -1, I64_MIN]
    for k in keys:
        p.check("ht_insert", k, signed(k * 3, 64))  # an i64 argument: the product's 64-bit value
    assert p.value("ht_count") == len(set(keys))
    for k in keys[::3]:
        p.value("ht_delete", k)
    for k in keys + [rand64(rng) for _ in range(50)]:
        p.value("ht_lookup", k, -7)
    for k in keys[::5]:
        p.value("ht_insert", k, 1)  # re-insert over tombstones and live keys
    p.value("ht_count")
    p.value("ht_cap")
    for n, seed in ((10, 1), (1000, 2), (20000, 3)):
        p.value("ht_workload", n, seed)


TEXTS = [
    b"",
    b"a",
    b"hello world",
    b"  the quick brown fox\tjumps over\nthe lazy dog  ",
    b"abababababcabababab" * 20,
    bytes(random.Random(9).choice(b"ab c") for _ in range(20000)),
]


@pytest.mark.parametrize("text", range(len(TEXTS)))
def test_strings(pairs, text: int) -> None:
    p = get(pairs, "strings")
    buf = p.value("buf_addr")
    pat = p.value("pat_addr")
    data = TEXTS[text]
    p.write(buf, data + b"\0")
    assert p.value("strlen_buf") == len(data)
    assert p.value("words") == len(data.split())
    for pattern in (b"ab", b"abc", b"ababc", b"the", b"z", b"b c a"):
        p.write(pat, pattern + b"\0")
        p.value("kmp")
    for regex in (b"^hel", b"o*w", b"a.c", b"lazy dog  $", b"b*c", b"x*", b"^$", b"q.*k"):
        p.write(pat, regex + b"\0")
        p.value("regex")
    p.value("reverse")
    p.value("upcase")
    p.same_memory(buf, len(data) + 1)


def test_memory_grow_bump_allocator(pairs) -> None:
    p = get(pairs, "bump")
    start = p.value("pages")
    for n, seed in ((10, 1), (100_000, 2), (1, 3), (300_000, 4), (65536, 5)):
        p.value("take", n, seed)
    grown = p.value("pages")
    assert grown > start
    p.value("sweep", 0, grown * 65536)
    assert p.value("grow", 0) == grown
    assert p.value("grow", 1 << 20) == -1  # past the declared maximum: refused on both sides
    p.value("take", 2_000_000, 6)
    assert p.value("pages") > grown


# -- traps ---------------------------------------------------------------------------------------------------
def test_traps_with_backtraces(pairs) -> None:
    p = get(pairs, "traps")
    assert p.value("outer", 10, 3) == (20 // 3 + 1) * 3
    t = p.check("outer", 10, 0)
    assert t == Trapped("integer divide by zero", ())
    assert isinstance(t, Trapped) and t.backtrace == ("divide", "middle", "outer")
    assert p.ref.call("outer", 10, 0).backtrace == t.backtrace  # wasmtime names the same frames
    t = p.check("trap_chain", 5)
    assert t == Trapped("unreachable", ())
    assert isinstance(t, Trapped) and t.backtrace == ("boom", "level2", "level1", "trap_chain")
    assert p.check("trap_chain", 1) == [1]
    assert p.check("divide64", 1, 0) == Trapped("integer divide by zero", ())
    assert p.check("rem64", 5, 0) == Trapped("integer divide by zero", ())
    t = p.check("recurse_then_trap", 50)
    assert isinstance(t, Trapped) and t.backtrace == ("recurse_then_trap",) * 51
    assert p.value("outer", 7, 2) == 24  # usable after traps


def test_stack_exhaustion_traps(pairs) -> None:
    p = get(pairs, "traps")
    t = p.check("forever", 0)
    assert t == Trapped("call stack exhausted", ())
    assert p.value("outer", 1, 1) == 9


# -- PENDING and continue ------------------------------------------------------------------------------------
def test_pending_and_resume(pairs) -> None:
    p = get(pairs, "recursion")
    inst = p.kernel.instance
    want = p.value("fib", 22)
    res = inst.start(inst.export_index("fib"), [22], budget=500)
    assert isinstance(res, Pending)
    steps = 0
    while isinstance(res, Pending):
        res = inst.resume(res.token, budget=500)
        steps += 1
    assert res == [want]
    assert steps > 10


def test_stale_token_refused(pairs) -> None:
    p = get(pairs, "recursion")
    inst = p.kernel.instance
    res = inst.start(inst.export_index("fib"), [20], budget=100)
    assert isinstance(res, Pending)
    inst.reset(0)
    with pytest.raises(CallError):
        inst.resume(res.token)
    assert inst.call("fib", 10) == [55]  # the fiber is free again


def test_two_fibers_interleaved(pairs) -> None:
    p = get(pairs, "recursion")
    inst = p.kernel.instance
    want = [p.value("ack", 2, 200), p.value("fib", 21)]
    pending = [
        inst.start(inst.export_index("ack"), [2, 200], fiber=0, budget=300),
        inst.start(inst.export_index("fib"), [21], fiber=1, budget=300),
    ]
    assert all(isinstance(r, Pending) for r in pending)
    rounds = 0
    while any(isinstance(r, Pending) for r in pending):
        for f in (0, 1):
            r = pending[f]
            if isinstance(r, Pending):
                assert r.token >> 32 == f
                pending[f] = inst.resume(r.token, budget=300)
        rounds += 1
    assert pending == [[want[0]], [want[1]]]
    assert rounds > 5


# -- profiles ------------------------------------------------------------------------------------------------
PROFILES = [Options(may_goto=False), Options(checked=False)]


@pytest.mark.parametrize("options", PROFILES, ids=["no-may_goto", "unchecked"])
def test_profiles_agree(pairs, options: Options) -> None:
    rec = get(pairs, "recursion", options)
    for n in (0, 1, 15, 20):
        rec.value("fib", n)
    rec.value("deep", 10_000)
    loop = get(pairs, "loop", options)
    for n, seed in ((0, 1), (1000, 5), (100_000, 9)):
        loop.value("spin", n, seed)
    loop.value("nested", 3, 77)
    qs = get(pairs, "qsort", options)
    for k in (0, 1, 2):
        assert qs.value("sort_ints", 2000, 31 + k, k, 1000) != -1
    qs.value("sort_recs", 500, 4)
    if not options.may_goto:
        # every back-edge went through the dispatcher
        assert loop.stats.transitions > 10_000
