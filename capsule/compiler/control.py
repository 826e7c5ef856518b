"""Structured control flow: block, loop, if/else, end, the branches, return, unreachable.

Control flow inside a function is plain BPF jumps. A block's values meet at its label in the homes of their
slots, so a branch moves the values it carries into place and jumps (constants are placed before any join).
A loop head is a region of its own: a back-edge stays in the region behind ``may_goto`` and suspends to that
region when it fires, or, without ``may_goto``, always goes through the dispatcher. A branch to the function
body is a return.
"""

from __future__ import annotations

from collections.abc import Callable

from capsule.bpf.asm import FP, alu, exit_, ja, jmp, ldx, may_goto, mov, st, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import BlockType, BrTable, Instr, Op

from . import abi
from .abi import BPF_FIBER
from .calls import leave_return
from .code import Code, RegionKey
from .emit import T0, T1
from .state import Ctl, FunctionState, Lowering
from .values import Slot, load_frame, store_frame

JumpTo = Callable[[str], None]  # emits a conditional jump to a label


def block(fs: FunctionState, ins: Instr) -> None:
    params, results = fs.block_types(ins.imm_as(BlockType))
    fs.stack.materialize_all()
    lab = fs.fresh("b")
    fs.ctls.append(Ctl("block", lab, len(fs.stack) - len(params), params, results, ins.end))


def loop(fs: FunctionState, ins: Instr) -> None:
    params, results = fs.block_types(ins.imm_as(BlockType))
    fs.stack.materialize_all()
    head = fs.fresh("loop")
    region = fs.new_region()
    # (a local dead at the head is written before it is read in every iteration: nothing to widen)
    head_live = fs.live.before[fs.pos]
    written = sorted({x.imm for x in fs.func.body[fs.pos + 1 : ins.end]
                      if x.op in (Op.LOCAL_SET, Op.LOCAL_TEE) and x.imm in fs.local_regs
                      and head_live >> x.imm_as(int) & 1})
    widen = tuple((n, fs.local_regs[n]) for n in written)
    fs.ctls.append(Ctl("loop", head, len(fs.stack) - len(params), params, results, ins.end, region=region,
                       widen=widen, live=head_live))
    # Coming in, everything goes through the frame and back, exactly as at the region entry (reached from
    # the dispatcher): values loaded from the arena are scalars the verifier does not know, so the loop's
    # states converge instead of being walked iteration by iteration from known constants.
    fs.stack.spill_regs(len(fs.stack))
    fs.code.label(region.label)
    fs.stack.reload_regs(len(fs.stack))
    fs.code.label(head)


def can_split(fs: FunctionState) -> bool:
    """Whether no forward jump emitted so far lands beyond this point: an open block some branch targets, or an
    ``if`` whose else (or end) is still ahead of a jump, would let paths from before a cut flow past its exit
    and keep their pending branches."""
    if fs.dead:
        return False
    for c in fs.ctls:
        if c.kind == "if" and (c.else_label is not None or c.targeted):
            return False
        if c.kind == "block" and c.targeted:
            return False
    return True


def split_region(fs: FunctionState) -> None:
    """End the path here and go on in a new region, through the dispatcher: as a loop head is entered, but
    with an exit before it, so that the verifier drops the branches it keeps pending on the way here
    (``function.SPLIT_BRANCHES``). Costs one dispatcher transition at run time."""
    fs.stack.materialize_all()
    region = fs.new_region()
    fs.stack.spill_regs(len(fs.stack))
    fs.leave_with_state(False, region=region)
    fs.code.label(region.label)
    fs.stack.reload_regs(len(fs.stack))


def if_(fs: FunctionState, ins: Instr) -> None:
    slot, cond = fs.stack.pop()
    open_if(fs, ins, lambda target: fs.emit(jmp(Jmp.JEQ, fs.stack.read(slot, cond, T0), 0, target, w32=True)))


def open_if(fs: FunctionState, ins: Instr, jump_if_false: JumpTo) -> None:
    """Open an ``if`` whose condition was popped; ``jump_if_false(label)`` emits the test."""
    params, results = fs.block_types(ins.imm_as(BlockType))
    fs.stack.materialize_all()
    lab = fs.fresh("if")
    c = Ctl("if", lab, len(fs.stack) - len(params), params, results, ins.end, ins.else_)
    c.else_label = lab + ".else"
    fs.ctls.append(c)
    jump_if_false(c.else_label)


def else_(fs: FunctionState, ins: Instr) -> None:
    c = fs.ctls[-1]
    if not fs.dead:
        fs.stack.materialize_all()
        fs.emit(ja(c.label))
        c.targeted = True
    assert c.else_label is not None
    fs.code.label(c.else_label)
    c.else_label = None
    c.in_else = True
    fs.stack.replace_from(c.base, c.params)
    fs.dead = False


def end(fs: FunctionState, ins: Instr) -> None:
    c = fs.ctls.pop()
    reachable = not fs.dead
    if reachable:
        fs.stack.materialize_all()
    if c.kind == "func":
        if reachable:
            do_return(fs)
        return
    if c.else_label is not None:  # an if without else: the false path passes the params through
        fs.code.label(c.else_label)
        reachable = True
    if c.kind != "loop":
        fs.code.label(c.label)
        reachable = reachable or c.targeted
    fs.stack.replace_from(c.base, c.results)
    fs.dead = not reachable


def skip_dead(fs: FunctionState, i: int) -> int:
    """The index to continue at after unreachable instruction ``i``: the innermost block's ``else``/``end``."""
    c = fs.ctls[-1]
    if c.kind == "if" and not c.in_else and c.else_index >= 0 and c.else_index > i:
        return c.else_index
    return c.end_index


# -- branches ---------------------------------------------------------------------------------------------------

def branch_moves(fs: FunctionState, c: Ctl) -> None:
    """Move the values a branch to ``c`` carries into the target's slots."""
    k = len(c.branch_types)
    h = len(fs.stack)
    for j in range(k):
        fs.stack.move(h - k + j, c.base + j)


def jump_to(fs: FunctionState, c: Ctl) -> None:
    """Jump to a label whose values are in place: a loop back-edge may suspend (or always does, without
    ``may_goto``), any other target is a plain jump."""
    if c.kind == "loop":
        assert c.region is not None
        if c.latch is not None:
            fs.emit(ja(c.latch))
            return
        if fs.opt.may_goto:
            # One latch per loop, shared by its back-edges: the values are in the same homes on every one, so
            # the code after this point is the same. Each may_goto is a patch of the whole program when the
            # kernel loads it (``do_misc_fixups``), so one per loop instead of one per back-edge is load time.
            c.latch = fs.fresh("latch")
            fs.code.label(c.latch)
        # The register locals the loop writes go through the frame on every back-edge. Along some path a local
        # may hold a value the verifier knows exactly (a counter that was 0 on the path where "i == 0"), and
        # iterations from an exact value never lie within an earlier one's, so may_goto cannot prune them: a
        # value loaded from the arena is one the verifier knows nothing about (fd_readdir's skip loop walked
        # 8,192 iterations without this).
        for n, r in c.widen:
            fs.emit(store_frame(fs.stack.local_off(n), r), load_frame(r, fs.stack.local_off(n)))
        jump_to_head(fs, c.label, c.region, c.base + len(c.params), c.live)
    else:
        c.targeted = True
        fs.emit(ja(c.label))


def jump_to_head(fs: FunctionState, head: str, region: RegionKey, height: int, live: int | None = None) -> None:
    """A loop back-edge: behind ``may_goto`` (suspending to ``region`` when it fires), or, without it,
    through the dispatcher every time. ``live``: the locals live at the head, which is all a suspension
    saves (the head reloads no more); the back-edge's own point may have more live (a ``br_if`` falls
    through to code that reads others), and the loop's later back-edges, jumping to this one's code
    (``Ctl.latch``), fewer, perhaps never set on their paths."""
    saved, fs.live_override = fs.live_override, live
    try:
        _back_edge(fs, head, region, height)
    finally:
        fs.live_override = saved


def _back_edge(fs: FunctionState, head: str, region: RegionKey, height: int) -> None:
    if fs.opt.may_goto:
        susp = fs.fresh("susp")
        if fs.opt.hook is not None:
            # on a hook every iteration is charged to the packet's budget (``hooks``): a handler looping for
            # ever ends when its budget does, not after may_goto's quarter of a second
            fs.emit(ldx(8, T1, FP, BPF_FIBER), ldx(8, T0, T1, abi.FIBER_RUN_BUDGET), jmp(Jmp.JEQ, T0, 0, susp),
                    alu(Alu.SUB, T0, 1), stx(8, T1, abi.FIBER_RUN_BUDGET, T0))
        fs.emit(may_goto(susp), ja(head))
        _suspend_stub(fs, susp, height, region)
    else:
        fs.stack.spill_regs(height)
        fs.leave_with_state(False, region=region)


def _suspend_stub(fs: FunctionState, label: str, height: int, region: RegionKey) -> None:
    """Out-of-line code for a loop whose ``may_goto`` fired: save the stack and resume at the loop head."""
    saved = fs.code
    stub = Code()
    fs.code = stub
    fs.stack.spill_regs(height)
    # may_goto fired: this invocation has run long enough; a zero budget makes the dispatcher stop
    # (the budget left is kept in FIBER_RUN_COUNT so that the dispatcher still counts the transitions run)
    fs.emit(ldx(8, T1, FP, BPF_FIBER), ldx(8, T0, T1, abi.FIBER_RUN_BUDGET), stx(8, T1, abi.FIBER_RUN_COUNT, T0),
            st(8, T1, abi.FIBER_RUN_BUDGET, 0))
    fs.leave_with_state(False, region=region)
    fs.code = saved
    fs.pending_stubs.append((label, stub))


def br(fs: FunctionState, ins: Instr) -> None:
    branch(fs, fs.ctls[-1 - ins.imm_as(int)])
    fs.dead = True


def branch(fs: FunctionState, c: Ctl) -> None:
    """An unconditional branch to ``c`` (a branch to the function body is a return)."""
    if c.kind == "func":
        do_return(fs)
    else:
        branch_moves(fs, c)
        jump_to(fs, c)


def br_if(fs: FunctionState, ins: Instr) -> None:
    c = fs.ctls[-1 - ins.imm_as(int)]
    slot, cond = fs.stack.pop()
    r = fs.stack.read(slot, cond, T0)
    branch_if(fs, c, lambda target: fs.emit(jmp(Jmp.JNE, r, 0, target, w32=True)),
              lambda target: fs.emit(jmp(Jmp.JEQ, r, 0, target, w32=True)))


def branch_if(fs: FunctionState, c: Ctl, jump_if_true: JumpTo, jump_if_false: JumpTo) -> None:
    """A conditional branch to ``c``; the callbacks emit the test against a label."""
    k = len(c.branch_types)
    h = len(fs.stack)
    needs_moves = any(h - k + j != c.base + j or not isinstance(fs.stack[h - k + j], Slot) for j in range(k))
    if c.kind == "block" or c.kind == "if":
        if not needs_moves:
            c.targeted = True
            jump_if_true(c.label)
            return
    skip = fs.fresh("skip")
    jump_if_false(skip)
    saved = fs.stack.snapshot()
    branch(fs, c)
    fs.stack.restore(saved)
    fs.code.label(skip)


def br_table(fs: FunctionState, ins: Instr) -> None:
    table = ins.imm_as(BrTable)
    slot, idx = fs.stack.pop()
    r = fs.stack.read(slot, idx, T0)
    if r != T0:
        fs.emit(mov(T0, r))
    targets = list(table.labels)
    default = table.default
    # one stub per distinct target depth: moves, then the jump
    stubs: dict[int, str] = {}
    for d in [*targets, default]:
        if d not in stubs:
            stubs[d] = fs.fresh("bt")
    if targets:
        fs.emit(jmp(Jmp.JGE, T0, len(targets), stubs[default], w32=True))
        _bsearch(fs, targets, 0, len(targets), stubs)
    else:  # only a default target
        fs.emit(ja(stubs[default]))
    saved = fs.stack.snapshot()
    for d, lab in stubs.items():
        fs.code.label(lab)
        fs.stack.restore(saved)
        branch(fs, fs.ctls[-1 - d])
    fs.stack.restore(saved)
    fs.dead = True


def _bsearch(fs: FunctionState, targets: list[int], lo: int, hi: int, stubs: dict[int, str]) -> None:
    """Compare tree over T0 in [lo, hi) jumping to each index's stub."""
    if hi - lo <= 3:
        for k in range(lo, hi - 1):
            fs.emit(jmp(Jmp.JEQ, T0, k, stubs[targets[k]], w32=True))
        fs.emit(ja(stubs[targets[hi - 1]]))
        return
    mid = (lo + hi) // 2
    upper = fs.fresh("bs")
    fs.emit(jmp(Jmp.JGE, T0, mid, upper, w32=True))
    _bsearch(fs, targets, lo, mid, stubs)
    fs.code.label(upper)
    _bsearch(fs, targets, mid, hi, stubs)


# -- leaving the function ---------------------------------------------------------------------------------------

def return_(fs: FunctionState, ins: Instr) -> None:
    do_return(fs)
    fs.dead = True


def do_return(fs: FunctionState) -> None:
    """Results into the frame's first slots, then continue at the caller's return region."""
    m = len(fs.type.results)
    h = len(fs.stack)
    for j in range(m):
        slot = h - m + j
        r = fs.stack.read(slot, fs.stack[slot], T0)
        fs.emit(store_frame(abi.FRAME_LOCALS + abi.SLOT * j, r))
    if fs.leaf:  # back to the BPF caller: 0 means returned (anything else is a trap state)
        fs.emit(mov(T0, 0), exit_())
        return
    leave_return(fs)


def unreachable(fs: FunctionState, ins: Instr) -> None:
    fs.trap(abi.Trap.UNREACHABLE)
    fs.dead = True


def nop(fs: FunctionState, ins: Instr) -> None:
    pass


LOWERINGS: dict[int, Lowering] = {
    Op.BLOCK: block, Op.LOOP: loop, Op.IF: if_, Op.ELSE: else_, Op.END: end, Op.BR: br, Op.BR_IF: br_if,
    Op.BR_TABLE: br_table, Op.RETURN: return_, Op.UNREACHABLE: unreachable, Op.NOP: nop,
}
