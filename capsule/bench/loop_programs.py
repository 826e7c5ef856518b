"""BPF programs for the loop-mechanism benchmark, emitted with the ``Builder`` (no C).

Every program computes the seed's workload (``bpf-loop-benchmark.txt``): ``sum += i`` for ``i`` in
``0..n-1`` through a *volatile* accumulator, i.e. a load, an add and a store to a memory slot per iteration
(``body`` such updates per iteration when the body is made bigger). The accumulator is a stack slot, as in the
seed, except for the dispatcher, whose whole point is that loop state lives in memory between calls.

All programs are XDP programs, because XDP is the one type here that has everything the benchmark needs:
``BPF_PROG_TEST_RUN`` with ``repeat`` (the kernel times many runs and reports the mean, with no syscall per
run), ``bpf_ktime_get_ns``, ``bpf_loop``, the ``bpf_iter_num_*`` kfuncs and direct map-value access. SYSCALL
programs run once per syscall and report no duration, so timing them costs a bpf_stats round trip per run.

Results go to one ARRAY map named ``out`` (one element, ``OUT_SIZE`` bytes, offsets ``OFF_*``): the sum, the
``bpf_ktime_get_ns`` time spent around the loop (accumulated over runs, with a run counter), a status, the
iterations performed, the bound ``n`` for the variants whose bound the verifier must not know, and the
dispatcher's state. Status is 0 for a completed loop, a negative errno a helper or kfunc returned (bpf_loop and
``bpf_iter_num_new`` return -E2BIG above 2^23 iterations, checked as signed 32 bits), ``STATUS_CUT`` when
``may_goto`` ended the loop, ``STATUS_PENDING`` when the dispatcher's budget ran out before the loop did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    R7,
    R8,
    R9,
    Builder,
    Reg,
    alu,
    call,
    call_helper,
    call_kfunc,
    exit_,
    ja,
    jmp,
    ld_func,
    ld_map_value,
    ldx,
    may_goto,
    mov,
    movsx,
    st,
    stx,
)
from capsule.bpf.btf import BTF, Linkage
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import FuncInfo
from capsule.bpf.uapi import Helper, XDPAction

OUT_MAP = "out"
OFF_SUM = 0  # u64: the accumulator's final value
OFF_ELAPSED = 8  # u64: sum over runs of bpf_ktime_get_ns() after the loop minus before it
OFF_RUNS = 16  # u64: runs (invocations) that added to OFF_ELAPSED
OFF_STATUS = 24  # s64: STATUS_DONE, STATUS_CUT, STATUS_PENDING, or a negative errno
OFF_ITERS = 32  # u64: iterations performed
OFF_N = 40  # u64: the bound, read at run time by the variants whose bound the verifier must not know
OFF_I = 48  # u64: dispatcher state, the loop counter
OFF_ACC = 56  # u64: dispatcher state, the accumulator
OFF_RESUME = 64  # u64: dispatcher state, 1 when the previous invocation stopped at the budget
OUT_SIZE = 72

STATUS_DONE = 0
STATUS_CUT = 1
STATUS_PENDING = 2

BPF_MAX_LOOPS = 1 << 23  # bpf_loop's and bpf_iter_num's cap on iterations (kernel/bpf/bpf_iter.c, helpers.c)
DISPATCH_BUDGET = 1 << 14  # dispatcher iterations per invocation; the verifier walks each one

# The stack frame of every main program (offsets from the frame pointer).
_SUM = -8  # the volatile accumulator
_ITER = -16  # struct bpf_iter_num (8 bytes, 8-aligned)


@dataclass(frozen=True)
class Mechanism:
    """One way to run a loop; ``key`` names it on the command line and in JSON."""

    key: str
    title: str
    available: bool = True
    note: str = ""
    compiled: bool = False  # compiled by capsule from a wasm module (``wasm_loop``), not generated here


MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("plain", "plain bounded loop (constant bound)"),
    Mechanism("bpf_loop", "bpf_loop helper + callback"),
    Mechanism("iter_num", "bpf_iter_num open-coded iterator"),
    Mechanism("may_goto_const", "may_goto, constant bound"),
    Mechanism("may_goto_unknown", "may_goto, bound from a map"),
    Mechanism("dispatcher", "dispatcher back-edge (global region)"),
    Mechanism("wasm_may_goto", "capsule wasm loop (may_goto)", compiled=True),
    Mechanism("wasm_dispatcher", "capsule wasm loop (dispatcher back-edges)", compiled=True),
)
MECHANISM_KEYS = tuple(m.key for m in MECHANISMS)
#: the mechanisms whose programs ``generate`` emits (the others are compiled by capsule from wasm)
GENERATED_KEYS = tuple(m.key for m in MECHANISMS if m.available and not m.compiled)


@dataclass
class LoopProgram:
    """A generated program before loading: ``insns`` keep the ``out`` map and kfunc refs for the loader.

    ``btf``/``func_infos`` are set when the program has subprograms (the bpf_loop callback, the dispatcher's
    global region): the kernel needs a FUNC per subprogram, and a global one is verified on its own only when
    BTF says it is global.
    """

    mechanism: str
    n: int
    body: int
    insns: list[Insn]
    btf: BTF | None = None
    func_infos: list[FuncInfo] = field(default_factory=list)
    bound_in_map: bool = False  # the host writes ``n`` to OFF_N before each run
    budget: int | None = None  # dispatcher iterations per invocation

    def expected_sum(self, iterations: int | None = None) -> int:
        """The accumulator after ``iterations`` (default: all ``n``) iterations."""
        k = self.n if iterations is None else iterations
        return self.body * k * (k - 1) // 2


def _accumulate(b: Builder, base: Reg, off: int, value: Reg, body: int, tmp: Reg = R1) -> None:
    """``body`` volatile updates ``*(u64 *)(base + off) += value``: load, add, store, as the seed writes them."""
    for _ in range(body):
        b.emit(ldx(8, tmp, base, off), alu(Alu.ADD, tmp, value), stx(8, base, off, tmp))


def _prologue(b: Builder) -> None:
    """r6 = &out; status = 0; sum = 0; r9 = start time (r6..r9 survive calls)."""
    b.emit(ld_map_value(R6, OUT_MAP), st(8, R6, OFF_STATUS, STATUS_DONE), st(8, FP, _SUM, 0))
    b.emit(call_helper(Helper.KTIME_GET_NS), mov(R9, R0))


def _epilogue(b: Builder, *, sum_from_out: bool = False) -> None:
    """Add the elapsed time and one run to ``out``, copy the accumulator out, return XDP_PASS."""
    b.label("epilogue")
    b.emit(call_helper(Helper.KTIME_GET_NS), alu(Alu.SUB, R0, R9))
    b.emit(ldx(8, R1, R6, OFF_ELAPSED), alu(Alu.ADD, R1, R0), stx(8, R6, OFF_ELAPSED, R1))
    b.emit(ldx(8, R1, R6, OFF_RUNS), alu(Alu.ADD, R1, 1), stx(8, R6, OFF_RUNS, R1))
    if sum_from_out:
        b.emit(ldx(8, R1, R6, OFF_ACC))
    else:
        b.emit(ldx(8, R1, FP, _SUM))
    b.emit(stx(8, R6, OFF_SUM, R1), mov(R0, XDPAction.PASS), exit_())


def _check_imm(n: int) -> None:
    if not 0 <= n < 1 << 31:
        raise ValueError(f"n must be in 0..2^31-1 for an immediate bound, got {n}")


def gen_plain(n: int, body: int = 1) -> LoopProgram:
    """``for (i = 0; i < n; i++)`` with ``n`` an immediate: the verifier walks every iteration."""
    _check_imm(n)
    b = Builder()
    _prologue(b)
    b.emit(mov(R7, 0))
    b.label("loop")
    b.emit(jmp(Jmp.JGE, R7, n, "done"))
    _accumulate(b, FP, _SUM, R7, body)
    b.emit(alu(Alu.ADD, R7, 1), ja("loop"))
    b.label("done")
    b.emit(stx(8, R6, OFF_ITERS, R7))
    _epilogue(b)
    return LoopProgram("plain", n, body, b.assemble())


def gen_may_goto(n: int, body: int = 1, *, bound_in_map: bool = False) -> LoopProgram:
    """The plain loop guarded by ``may_goto``; with ``bound_in_map`` the bound is loaded from ``out``.

    A bound loaded from memory is unknown to the verifier, so the states at the loop head converge after a
    few iterations; an immediate bound keeps ``i`` exact and the walk goes on for every iteration.
    """
    if not bound_in_map:
        _check_imm(n)
    b = Builder()
    _prologue(b)
    if bound_in_map:
        b.emit(ldx(8, R8, R6, OFF_N))
    b.emit(mov(R7, 0))
    b.label("loop")
    b.emit(jmp(Jmp.JGE, R7, R8, "done") if bound_in_map else jmp(Jmp.JGE, R7, n, "done"))
    b.emit(may_goto("cut"))
    _accumulate(b, FP, _SUM, R7, body)
    b.emit(alu(Alu.ADD, R7, 1), ja("loop"))
    b.label("cut")
    b.emit(st(8, R6, OFF_STATUS, STATUS_CUT))
    b.label("done")
    b.emit(stx(8, R6, OFF_ITERS, R7))
    _epilogue(b)
    key = "may_goto_unknown" if bound_in_map else "may_goto_const"
    return LoopProgram(key, n, body, b.assemble(), bound_in_map=bound_in_map)


def _btf_with_main(name: str) -> tuple[BTF, int]:
    """A BTF with ``int name(void *ctx)`` (global): the entry point's FUNC."""
    btf = BTF()
    int_id = btf.int_id(4, signed=True)
    main = btf.add_func(name, btf.add_func_proto(int_id, [("ctx", btf.add_ptr(0))]), Linkage.GLOBAL)
    return btf, main


def gen_bpf_loop(n: int, body: int = 1) -> LoopProgram:
    """``bpf_loop(n, step, &sum, 0)`` with ``step(i, ctx)`` doing the body; the callback is a static
    subprogram, named by a FUNC in BTF."""
    _check_imm(n)
    b = Builder()
    _prologue(b)
    b.emit(mov(R1, n), ld_func(R2, "step"), mov(R3, FP), alu(Alu.ADD, R3, _SUM), mov(R4, 0))
    b.emit(call_helper(Helper.LOOP))
    # the helper returns a long, but the kernel's inlined copy sets a 32-bit -E2BIG: compare as signed 32
    b.emit(movsx(R0, R0, 32), jmp(Jmp.JSGE, R0, 0, "ok"))
    b.emit(stx(8, R6, OFF_STATUS, R0), mov(R0, 0))
    b.label("ok")
    b.emit(stx(8, R6, OFF_ITERS, R0))
    _epilogue(b)
    step_at = b.slots
    b.label("step")  # long step(u64 index, void *ctx): r1 = index, r2 = &sum
    _accumulate(b, R2, 0, R1, body, tmp=R3)
    b.emit(mov(R0, 0), exit_())
    btf, main = _btf_with_main("loop_bpf_loop")
    s64, u64 = btf.int_id(8, signed=True), btf.int_id(8)
    proto = btf.add_func_proto(s64, [("index", u64), ("ctx", btf.add_ptr(0))])
    step = btf.add_func("step", proto, Linkage.STATIC)
    return LoopProgram("bpf_loop", n, body, b.assemble(), btf, [FuncInfo(0, main), FuncInfo(step_at, step)])


def gen_iter_num(n: int, body: int = 1) -> LoopProgram:
    """``bpf_for(i, 0, n)``: ``bpf_iter_num_new/next/destroy`` over an iterator on the stack."""
    _check_imm(n)
    b = Builder()
    _prologue(b)
    b.emit(mov(R1, FP), alu(Alu.ADD, R1, _ITER), mov(R2, 0), mov(R3, n), call_kfunc("bpf_iter_num_new"))
    # on failure (-E2BIG above 2^23) the iterator is empty but still has to be destroyed
    b.emit(movsx(R0, R0, 32), jmp(Jmp.JEQ, R0, 0, "ok"), stx(8, R6, OFF_STATUS, R0))
    b.label("ok")
    b.emit(mov(R7, -1))
    b.label("loop")
    b.emit(mov(R1, FP), alu(Alu.ADD, R1, _ITER), call_kfunc("bpf_iter_num_next"))
    b.emit(jmp(Jmp.JEQ, R0, 0, "done"), ldx(4, R7, R0, 0))
    _accumulate(b, FP, _SUM, R7, body)
    b.emit(ja("loop"))
    b.label("done")
    b.emit(mov(R1, FP), alu(Alu.ADD, R1, _ITER), call_kfunc("bpf_iter_num_destroy"))
    b.emit(alu(Alu.ADD, R7, 1), stx(8, R6, OFF_ITERS, R7))  # the last index + 1
    _epilogue(b)
    return LoopProgram("iter_num", n, body, b.assemble())


def gen_dispatcher(n: int, body: int = 1, *, budget: int = DISPATCH_BUDGET) -> LoopProgram:
    """A bounded dispatcher loop calling the global subprogram ``region`` once per iteration.

    ``region`` runs one iteration of the loop with its state (``i``, the accumulator) in ``out``, and returns 1
    once ``i`` reached ``n``. The verifier checks ``region`` once; it walks the dispatcher loop ``budget``
    times (a handful of instructions each). When the budget runs out first, the program records
    ``STATUS_PENDING`` and leaves ``OFF_RESUME`` set, and the next invocation continues where it stopped.

    The branch shapes keep the verifier's stack of pending branches short: at each conditional jump the
    verifier explores the fall-through first and queues the target, so the exits are fall-throughs and the
    back-edges are jump targets.
    """
    _check_imm(n)
    if not 1 <= budget < 1 << 31:
        raise ValueError(f"dispatcher budget must be positive, got {budget}")
    b = Builder()
    _prologue(b)
    b.emit(ldx(8, R1, R6, OFF_RESUME), jmp(Jmp.JNE, R1, 0, "go"))
    b.emit(st(8, R6, OFF_I, 0), st(8, R6, OFF_ACC, 0))
    b.label("go")
    b.emit(mov(R7, 0))
    b.label("dispatch")
    b.emit(call("region"), jmp(Jmp.JEQ, R0, 0, "next"))
    b.emit(st(8, R6, OFF_RESUME, 0), ja("finish"))
    b.label("next")
    b.emit(alu(Alu.ADD, R7, 1), jmp(Jmp.JLT, R7, budget, "dispatch"))
    b.emit(st(8, R6, OFF_STATUS, STATUS_PENDING), st(8, R6, OFF_RESUME, 1))
    b.label("finish")
    b.emit(ldx(8, R1, R6, OFF_I), stx(8, R6, OFF_ITERS, R1))
    _epilogue(b, sum_from_out=True)
    region_at = b.slots
    b.label("region")  # int region(void): one iteration, state in memory
    b.emit(ld_map_value(R2, OUT_MAP), ldx(8, R4, R2, OFF_I), jmp(Jmp.JLT, R4, n, "step"))
    b.emit(mov(R0, 1), exit_())
    b.label("step")
    _accumulate(b, R2, OFF_ACC, R4, body, tmp=R3)
    b.emit(alu(Alu.ADD, R4, 1), stx(8, R2, OFF_I, R4), mov(R0, 0), exit_())
    btf, main = _btf_with_main("loop_dispatch")
    region = btf.add_func("region", btf.add_func_proto(btf.int_id(4, signed=True), []), Linkage.GLOBAL)
    return LoopProgram("dispatcher", n, body, b.assemble(), btf,
                       [FuncInfo(0, main), FuncInfo(region_at, region)], budget=budget)


def generate(mechanism: str, n: int, body: int = 1, *, budget: int = DISPATCH_BUDGET) -> LoopProgram:
    """The program for ``mechanism`` (a key of ``MECHANISMS``) summing ``0..n-1`` with ``body`` updates."""
    if body < 1:
        raise ValueError(f"body must be at least 1 update per iteration, got {body}")
    if mechanism == "plain":
        return gen_plain(n, body)
    if mechanism == "bpf_loop":
        return gen_bpf_loop(n, body)
    if mechanism == "iter_num":
        return gen_iter_num(n, body)
    if mechanism == "may_goto_const":
        return gen_may_goto(n, body)
    if mechanism == "may_goto_unknown":
        return gen_may_goto(n, body, bound_in_map=True)
    if mechanism == "dispatcher":
        return gen_dispatcher(n, body, budget=budget)
    if mechanism in MECHANISM_KEYS:
        raise ValueError(f"mechanism {mechanism!r} is compiled from wasm by capsule: see capsule.bench.wasm_loop")
    raise ValueError(f"unknown mechanism {mechanism!r} (known: {', '.join(MECHANISM_KEYS)})")
