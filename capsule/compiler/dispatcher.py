"""The code the verifier sees around the regions: physical-function prologues and the dispatcher loop.

A *physical function* is a global BPF subprogram ``u64 phys_N(u64 state, u64 fiber)`` holding the regions of
several wasm functions. Its prologue unpacks the state into the frame pointer and the region, sets up the
BPF-stack scratch slots regions rely on (``abi.BPF_*``), and jumps to the region through a balanced compare
tree. Being global, each is verified once, whatever calls it.

The entry program ``capsule_run(ctx)`` checks the continuation token, then loops: pick the physical function
from the state's low byte (another compare tree), call it, take the next state, until the called function
returns to the host, a trap, or the budget (``ctx.budget`` transitions, or ``may_goto``) runs out.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsule.bpf.asm import FP as R10
from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    R7,
    R8,
    R9,
    Reg,
    alu,
    call,
    call_helper,
    exit_,
    ja,
    jmp,
    ld_map_fd,
    ldx,
    may_goto,
    mov,
    st,
    stx,
)
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.uapi import Helper

from . import abi
from .abi import BPF_FIBER, BPF_FIBER_SCALAR, BPF_FP_SCALAR, BPF_MEM_BYTES, BPF_RUNTIME
from .code import Code
from .emit import T0
from .values import FRAME
from .window import Window


def phys_name(p: int) -> str:
    return f"capsule_phys_{p}"


def leaf_name(func: int) -> str:
    return f"capsule_leaf_{func}"


def phys_prologue(code: Code, p: int, region_labels: list[str], win: Window) -> None:
    """Entry of physical function ``p``: r1 = state, r2 = fiber address. Region ``q`` is ``region_labels[q]``."""
    code.label(phys_name(p))
    code.emit(*fiber_setup(R2, win), mov(R3, R1), alu(Alu.RSH, R3, 32), *fp_setup(R3, win),
              mov(T0, R1, w32=True), alu(Alu.RSH, T0, abi.PHYS_BITS))
    _tree(code, T0, region_labels, 0, len(region_labels), f"p{p}")


def fp_setup(fp: Reg, win: Window) -> list[Insn]:
    """FRAME and the frame-pointer scratch slot from a frame's guest address in ``fp`` (clobbered in the map
    tier)."""
    return [stx(8, R10, BPF_FP_SCALAR, fp), *win.pointer("stack", FRAME, fp)]


def fiber_setup(fiber: Reg, win: Window) -> list[Insn]:
    """The fiber, runtime and memory-size scratch slots from the fiber record's guest address (clobbered, and
    T0 in the map tier)."""
    return [
        stx(8, R10, BPF_FIBER_SCALAR, fiber), *win.pointer("fiber", fiber, fiber, T0), stx(8, R10, BPF_FIBER, fiber),
        *win.runtime_base(fiber), stx(8, R10, BPF_RUNTIME, fiber),
        ldx(8, fiber, fiber, abi.CTRL_MEM_BYTES), stx(8, R10, BPF_MEM_BYTES, fiber),
    ]


def frame_setup(fp: Reg, fiber: Reg, win: Window) -> list[Insn]:
    """What every region (and leaf function) relies on: FRAME = the frame, and the BPF-stack scratch slots.
    ``fp`` and ``fiber`` hold guest addresses; ``fiber`` is clobbered (``fp`` and T0 too in the map tier)."""
    return [*fp_setup(fp, win), *fiber_setup(fiber, win)]


def _tree(code: Code, reg: Reg, labels: list[str], lo: int, hi: int, stem: str) -> None:
    """Balanced compare tree on ``reg`` in [lo, hi) jumping to ``labels[k]``; out-of-range values go to the last."""
    if hi - lo <= 2:
        if hi - lo == 2:
            code.emit(jmp(Jmp.JEQ, reg, lo, labels[lo], w32=True))
        code.emit(ja(labels[hi - 1]))
        return
    mid = (lo + hi) // 2
    upper = code.fresh(f"{stem}.t")
    code.emit(jmp(Jmp.JGE, reg, mid, upper, w32=True))
    _tree(code, reg, labels, lo, mid, stem)
    code.label(upper)
    _tree(code, reg, labels, mid, hi, stem)


def match_tree(code: Code, reg: Reg, cases: list[tuple[int, str]], default: str, stem: str, *,
               linear: int = 2) -> None:
    """Jump to the label of the case equal to ``w(reg)``, else to ``default``: a balanced tree over sorted values,
    with up to ``linear`` cases compared one by one at its leaves."""
    if len(cases) <= linear:
        for value, label in cases:
            code.emit(jmp(Jmp.JEQ, reg, value, label, w32=True))
        code.emit(ja(default))
        return
    mid = len(cases) // 2
    upper = code.fresh(f"{stem}.m")
    code.emit(jmp(Jmp.JGE, reg, cases[mid][0], upper, w32=True))
    match_tree(code, reg, cases[:mid], default, stem, linear=linear)
    code.label(upper)
    match_tree(code, reg, cases[mid:], default, stem, linear=linear)


def call_tree(code: Code, local: list[int], stem: str, after: str, foreign: str | None) -> None:
    """Call the physical function R1 names, if this program holds it: ``R9 = phys_N(R9, fiber at [R10-8])``;
    any other value jumps to ``foreign`` (R1 still the physical function), or with no ``foreign`` (a program
    holding them all) to the last one."""
    if not local:  # a module without functions: no region can be named, nothing to call
        code.emit(ja(after))
        return
    labels = [f"{stem}.call{p}" for p in local]
    if foreign is None:
        _tree(code, R1, labels, 0, len(labels), stem)  # local is 0..n-1
    else:
        match_tree(code, R1, list(zip(local, labels, strict=True)), foreign, stem)
    for p, label in zip(local, labels, strict=True):
        code.label(label)
        code.emit(mov(R1, R9), ldx(8, R2, R10, abi.BPF_ENTRY_FIBER), call(phys_name(p)), mov(R9, R0), ja(after))


@dataclass(frozen=True)
class Layout:
    """What program ``k`` of a compiled object holds and where the rest is: ``local`` its physical functions,
    ``owners`` (range of physical functions, program) for the ones it hands over with a tail call."""

    k: int
    local: list[int]
    owners: list[tuple[range, int]]

    @property
    def split(self) -> bool:
        return bool(self.owners)


def entry_program(layout: Layout, nfibers: int, may_goto_profile: bool, win: Window) -> Code:
    """``int capsule_run(struct __sk_buff *)``: run the fiber named by the context (the packet's first
    ``abi.CTX_SIZE`` bytes) until done, trap, or budget. In a split object, a state in another program's
    physical function is handed to it with a tail call (the budget left and the transitions so far written
    into the context, which the next program reads as its own); when the chain of tail calls is used up, the
    invocation returns PENDING and the host continues it."""
    code = Code()
    bad, loop, out, special, pending = "run.bad", "run.loop", "run.out", "run.special", "run.pending"
    foreign = "run.foreign" if layout.split else None
    code.label(abi.program_name(layout.k))
    code.emit(stx(8, R10, abi.BPF_ENTRY_CTX, R1))  # for the tail call
    # R6 = the context in the packet; a packet too short for it is refused without touching anything
    code.emit(ldx(4, R2, R1, abi.SKB_DATA), ldx(4, R3, R1, abi.SKB_DATA_END), mov(R4, R2),
              alu(Alu.ADD, R4, abi.CTX_SIZE), jmp(Jmp.JGT, R4, R3, "run.short"))
    code.emit(
        mov(R6, R2),
        *win.entry_reference(R1),
        ldx(4, R1, R6, abi.CTX_FIBER), jmp(Jmp.JGE, R1, nfibers, bad),
        alu(Alu.MUL, R1, abi.FIBER_SIZE), alu(Alu.ADD, R1, abi.FIBERS - abi.RT_BASE),
        mov(R2, abi.RT_BASE, w32=True), alu(Alu.ADD, R1, R2, w32=True),
        stx(8, R10, abi.BPF_ENTRY_FIBER, R1),  # the fiber's address, passed to every physical function
        *win.pointer("fiber", R7, R1),
        ldx(4, R2, R6, abi.CTX_GENERATION), ldx(4, R3, R7, abi.FIBER_GENERATION), jmp(Jmp.JNE, R2, R3, bad),
    )
    # a run after one that ended (repeat) does nothing; one handed over from another program goes on with the
    # budget that program left
    code.emit(ldx(8, R2, R6, abi.CTX_STATUS), jmp(Jmp.JNE, R2, abi.Status.PENDING, "run.over"),
              ldx(8, R8, R6, abi.CTX_BUDGET), ldx(8, R2, R6, abi.CTX_CHAINED), jmp(Jmp.JEQ, R2, 0, "run.fresh"),
              ldx(8, R8, R6, abi.CTX_LEFT), st(8, R6, abi.CTX_CHAINED, 0))
    code.label("run.fresh")
    code.emit(stx(8, R10, abi.BPF_ENTRY_BUDGET, R8), ldx(8, R9, R7, abi.FIBER_STATE))
    if may_goto_profile:
        # one loop, cut by the budget or by may_goto, whichever comes first; a may_goto that fires in a region
        # zeroes the budget and leaves what was left of it in FIBER_RUN_COUNT (for the transition count)
        code.emit(st(8, R7, abi.FIBER_RUN_COUNT, 0))
        code.label(loop)
        code.emit(mov(R1, R9, w32=True), jmp(Jmp.JGE, R1, abi.SPECIAL_BASE, special, w32=True))
        # the budget lives in the fiber record while a physical function runs: chained regions charge it too
        code.emit(may_goto(pending), jmp(Jmp.JEQ, R8, 0, pending), alu(Alu.SUB, R8, 1),
                  stx(8, R7, abi.FIBER_RUN_BUDGET, R8), alu(Alu.AND, R1, PHYS_MASK))
        call_tree(code, layout.local, "run", "run.back", foreign)
        code.label("run.back")
        code.emit(ldx(8, R8, R7, abi.FIBER_RUN_BUDGET), ja(loop))
    else:
        # bounded loops only: RUN_ROUNDS calls of capsule_round, each ROUND_STEPS calls of capsule_step, each
        # STEP_REGIONS regions; the regions run are counted in the fiber record
        code.emit(st(8, R7, abi.FIBER_RUN_COUNT, 0), stx(8, R7, abi.FIBER_RUN_BUDGET, R8), mov(R8, 0))
        code.label(loop)
        code.emit(mov(R1, R9, w32=True), jmp(Jmp.JGE, R1, abi.SPECIAL_BASE, special, w32=True))
        if foreign is not None:
            code.emit(alu(Alu.AND, R1, PHYS_MASK))
            _not_local(code, R1, layout, foreign)
        code.emit(jmp(Jmp.JGE, R8, abi.RUN_ROUNDS, pending),
                  ldx(8, R1, R7, abi.FIBER_RUN_COUNT), ldx(8, R2, R7, abi.FIBER_RUN_BUDGET),
                  jmp(Jmp.JGE, R1, R2, pending), alu(Alu.ADD, R8, 1),
                  mov(R1, R9), ldx(8, R2, R10, abi.BPF_ENTRY_FIBER), call("capsule_round"), mov(R9, R0), ja(loop))
    # outcomes: status in R0, detail in R2
    code.label(special)
    code.emit(mov(R2, R9, w32=True), jmp(Jmp.JEQ, R2, abi.RETURN_TO_HOST, "run.done", w32=True),
              jmp(Jmp.JEQ, R2, abi.SPECIAL_YIELD, "run.yield", w32=True),
              jmp(Jmp.JEQ, R2, abi.SPECIAL_EXIT, "run.exit", w32=True),
              jmp(Jmp.JEQ, R2, abi.SPECIAL_GROW, "run.grow", w32=True))
    code.emit(alu(Alu.SUB, R2, abi.SPECIAL_BASE, w32=True), mov(R0, abi.Status.TRAP),
              mov(R1, R9), alu(Alu.RSH, R1, 32), stx(8, R7, abi.FIBER_TRAP_FP, R1), ja(out))
    code.label("run.yield")  # the fiber continues where it yielded
    code.emit(ldx(8, R9, R7, abi.FIBER_RESUME), mov(R0, abi.Status.YIELD), mov(R2, 0), ja(out))
    code.label("run.grow")  # the fiber continues where it asked, once the host has backed the pages
    code.emit(ldx(8, R9, R7, abi.FIBER_RESUME), mov(R0, abi.Status.GROW), ldx(8, R2, R7, abi.FIBER_GROW), ja(out))
    code.label("run.exit")  # the fiber is idle again
    code.emit(ldx(8, R2, R7, abi.FIBER_EXIT_CODE), mov(R9, abi.RETURN_TO_HOST, w32=True), mov(R0, abi.Status.EXIT),
              ja(out))
    code.label("run.done")
    code.emit(mov(R0, abi.Status.DONE), mov(R2, 0), ja(out))
    code.label(pending)
    code.emit(mov(R0, abi.Status.PENDING), mov(R2, 0))
    code.label(out)
    code.emit(stx(8, R7, abi.FIBER_STATE, R9), stx(8, R7, abi.FIBER_STATUS, R0),
              stx(8, R6, abi.CTX_STATUS, R0), stx(8, R6, abi.CTX_DETAIL, R2))
    _account(code, may_goto_profile)
    code.emit(exit_())
    if foreign is not None:
        _hand_over(code, layout, foreign, may_goto_profile, pending)
    code.label(bad)
    code.emit(mov(R0, abi.Status.BAD_TOKEN), stx(8, R6, abi.CTX_STATUS, R0), exit_())
    code.label("run.over")
    code.emit(mov(R0, R2), exit_())
    code.label("run.short")
    code.emit(mov(R0, abi.Status.BAD_TOKEN), exit_())
    if not may_goto_profile:
        _bounded_levels(code, layout, win)
    return code


PHYS_MASK = (1 << abi.PHYS_BITS) - 1  # the physical function is the state's low PHYS_BITS bits


def _account(code: Code, may_goto_profile: bool) -> None:
    """Add the transitions this program ran to the context's count and the fiber's (R6 = context, R7 =
    fiber, R8 = budget left); programs of a split object each add theirs."""
    if may_goto_profile:
        code.emit(ldx(8, R3, R10, abi.BPF_ENTRY_BUDGET), alu(Alu.SUB, R3, R8), ldx(8, R2, R7, abi.FIBER_RUN_COUNT),
                  alu(Alu.SUB, R3, R2))
    else:
        code.emit(ldx(8, R3, R7, abi.FIBER_RUN_COUNT))
    code.emit(ldx(8, R2, R6, abi.CTX_TRANSITIONS), alu(Alu.ADD, R2, R3), stx(8, R6, abi.CTX_TRANSITIONS, R2),
              ldx(8, R2, R7, abi.FIBER_TRANSITIONS), alu(Alu.ADD, R2, R3), stx(8, R7, abi.FIBER_TRANSITIONS, R2))


def _hand_over(code: Code, layout: Layout, foreign: str, may_goto_profile: bool, pending: str) -> None:
    """R1 = a physical function another program holds: save the state, account, leave the budget left in the
    context, and tail call the program that owns it; if the tail call fails (the chain of 33 is used up), the
    invocation ends PENDING, to be continued by the host."""
    code.label(foreign)
    if may_goto_profile:
        code.emit(alu(Alu.ADD, R8, 1))  # the loop charged a transition this program does not run
    # the owners' ranges are ascending and together hold every physical function that is not local
    for r, k in sorted(layout.owners, key=lambda o: o[0].start):
        code.emit(jmp(Jmp.JLT, R1, r.stop, f"run.to{k}", w32=True))
    code.emit(ja(pending))  # beyond every program: cannot happen for a region id this object made
    for _, k in layout.owners:
        code.label(f"run.to{k}")
        code.emit(mov(R3, k), ja("run.tail"))
    code.label("run.tail")
    code.emit(stx(8, R10, abi.BPF_ENTRY_TARGET, R3), stx(8, R7, abi.FIBER_STATE, R9))
    _account(code, may_goto_profile)
    if may_goto_profile:  # the budget left; nothing more to account here if the tail call fails
        code.emit(stx(8, R6, abi.CTX_LEFT, R8), st(8, R6, abi.CTX_CHAINED, 1), stx(8, R10, abi.BPF_ENTRY_BUDGET, R8))
    else:
        code.emit(ldx(8, R2, R7, abi.FIBER_RUN_BUDGET), ldx(8, R3, R7, abi.FIBER_RUN_COUNT), alu(Alu.SUB, R2, R3),
                  stx(8, R6, abi.CTX_LEFT, R2), st(8, R6, abi.CTX_CHAINED, 1), stx(8, R7, abi.FIBER_RUN_BUDGET, R2),
                  st(8, R7, abi.FIBER_RUN_COUNT, 0))
    code.emit(ldx(8, R2, R7, abi.FIBER_SWITCHES), alu(Alu.ADD, R2, 1), stx(8, R7, abi.FIBER_SWITCHES, R2),
              ldx(8, R1, R10, abi.BPF_ENTRY_CTX), ld_map_fd(R2, abi.PROGRAMS_MAP),
              ldx(8, R3, R10, abi.BPF_ENTRY_TARGET), call_helper(Helper.TAIL_CALL),
              st(8, R6, abi.CTX_CHAINED, 0), ja(pending))  # failed: the next run starts afresh


def _not_local(code: Code, reg: Reg, layout: Layout, foreign: str) -> None:
    """Jump to ``foreign`` unless physical function ``reg`` is one of this program's."""
    ok = code.fresh("local")
    ranges = _ranges(layout.local)
    for lo, hi in ranges:
        nxt = code.fresh("notin")
        code.emit(jmp(Jmp.JLT, reg, lo, nxt, w32=True), jmp(Jmp.JLT, reg, hi, ok, w32=True))
        code.label(nxt)
    code.emit(ja(foreign))
    code.label(ok)


def _ranges(values: list[int]) -> list[tuple[int, int]]:
    """Sorted values as [lo, hi) runs."""
    out: list[tuple[int, int]] = []
    for v in sorted(values):
        if out and out[-1][1] == v:
            out[-1] = (out[-1][0], v + 1)
        else:
            out.append((v, v + 1))
    return out


BOUNDED_FUNCS = ("capsule_round", "capsule_step")


def _bounded_levels(code: Code, layout: Layout, win: Window) -> None:
    """``u64 capsule_round(u64 state, u64 fiber)`` and ``u64 capsule_step(u64 state, u64 fiber)``: global
    functions with constant-bounded loops, so each is verified once and the verifier walks only their own
    iterations. R8 counts iterations, R9 carries the state, R7 is the fiber record. In a split object a state
    another program holds ends both loops, for the entry program to hand it over."""
    for name, limit, body in (("capsule_round", abi.ROUND_STEPS, "round"), ("capsule_step", abi.STEP_REGIONS, "step")):
        loop, done = f"{body}.loop", f"{body}.done"
        code.label(name)
        code.emit(mov(R9, R1), stx(8, R10, abi.BPF_ENTRY_FIBER, R2), *win.pointer("fiber", R7, R2), mov(R8, 0))
        code.label(loop)
        code.emit(mov(R1, R9, w32=True), jmp(Jmp.JGE, R1, abi.SPECIAL_BASE, done, w32=True))
        if layout.split:
            code.emit(alu(Alu.AND, R1, PHYS_MASK))
            _not_local(code, R1, layout, done)
        code.emit(jmp(Jmp.JGE, R8, limit, done), alu(Alu.ADD, R8, 1))
        if body == "round":
            code.emit(ldx(8, R1, R7, abi.FIBER_RUN_COUNT), ldx(8, R2, R7, abi.FIBER_RUN_BUDGET),
                      jmp(Jmp.JGE, R1, R2, done),
                      mov(R1, R9), ldx(8, R2, R10, abi.BPF_ENTRY_FIBER), call("capsule_step"), mov(R9, R0), ja(loop))
        else:
            code.emit(ldx(8, R1, R7, abi.FIBER_RUN_COUNT), alu(Alu.ADD, R1, 1), stx(8, R7, abi.FIBER_RUN_COUNT, R1),
                      mov(R1, R9), alu(Alu.AND, R1, PHYS_MASK))
            call_tree(code, layout.local, "step", loop, done if layout.split else None)
        code.label(done)
        code.emit(mov(R0, R9), exit_())
