"""Which locals of a wasm function are live where: read later before they are written again.

Lowering keeps some locals in registers (``values.register_plan``) and saves them to the frame wherever a
register cannot be trusted to survive: before a call, at a loop's entry and back-edge (so that the verifier
sees unknown scalars at the head), when a region ends. A local that is dead there (every path writes it
before reading it) needs neither the store nor the reload, and a local dead at the function's entry needs no
zeroing. This is the classic backward dataflow over wasm's structured control flow: a ``block``'s or ``if``'s
label is its ``end``, a ``loop``'s its head, so one backward walk is exact except at loop heads, which are
iterated to a fixed point. Sets are Python ints used as bit sets (bit ``n`` = local ``n``).
"""

from __future__ import annotations

from dataclasses import dataclass

from capsule.wasm import BrTable, Function, Instr, Op


@dataclass(frozen=True)
class Liveness:
    """``before[i]``: the locals live just before instruction ``i`` of the body (so ``before[i + 1]`` is what is
    live after it)."""

    before: list[int]

    def after(self, i: int) -> int:
        return self.before[i + 1] if i + 1 < len(self.before) else 0

    def live_after(self, i: int, n: int) -> bool:
        return bool(self.after(i) >> n & 1)

    def live_before(self, i: int, n: int) -> bool:
        return bool(self.before[i] >> n & 1)


_KILLS_ALL = (Op.RETURN, Op.UNREACHABLE)


def liveness(func: Function) -> Liveness:
    body = func.body
    heads: dict[int, int] = {}  # loop index -> live at its head, from the last walk
    while True:
        before = _walk(body, heads)
        changed = False
        for i, ins in enumerate(body):
            if ins.op == Op.LOOP and before[i] != heads.get(i, 0):
                heads[i] = before[i]
                changed = True
        if not changed:
            return Liveness(before)


def _walk(body: list[Instr], heads: dict[int, int]) -> list[int]:
    """One backward walk with the loop heads' sets of the previous walk."""
    n = len(body)
    before = [0] * n
    # open constructs, innermost last, met at their ``end`` walking backwards: (index of the construct,
    # the set live at its label)
    labels: list[tuple[int, int]] = []
    else_start: dict[int, int] = {}  # if index -> live at the start of its else arm
    starts: dict[int, int] = {}  # index of an ``end`` -> index of its block/loop/if (found by a forward scan)
    stack: list[int] = []
    for i, ins in enumerate(body):
        if ins.op in (Op.BLOCK, Op.LOOP, Op.IF):
            stack.append(i)
        elif ins.op == Op.END:
            starts[i] = stack.pop() if stack else -1  # -1: the function's own end
    live = 0
    for i in range(n - 1, -1, -1):
        ins = body[i]
        op = ins.op
        if op == Op.END:
            s = starts[i]
            # falling off the end continues after it; a branch to a block/if lands here too
            if s < 0:
                live = 0  # the function's end: its results are on the operand stack, no local is read
                labels.append((s, 0))
            else:
                labels.append((s, heads.get(s, 0) if body[s].op == Op.LOOP else live))
        elif op == Op.ELSE:
            # the then arm ends here and continues after the if's end: the label's set
            if_index = labels[-1][0]
            else_start[if_index] = live
            live = labels[-1][1]
        elif op in (Op.BLOCK, Op.LOOP):
            labels.pop()
        elif op == Op.IF:
            _, at_end = labels.pop()
            live |= else_start.pop(i, at_end)  # the false edge: the else arm, or straight to the end
        elif op == Op.BR:
            live = _label(labels, ins.imm_as(int))
        elif op == Op.BR_IF:
            live |= _label(labels, ins.imm_as(int))
        elif op == Op.BR_TABLE:
            table = ins.imm_as(BrTable)
            live = _label(labels, table.default)
            for d in table.labels:
                live |= _label(labels, d)
        elif op in _KILLS_ALL:
            live = 0
        elif op == Op.LOCAL_GET:
            live |= 1 << ins.imm_as(int)
        elif op in (Op.LOCAL_SET, Op.LOCAL_TEE):
            live &= ~(1 << ins.imm_as(int))
        before[i] = live
    return before


def _label(labels: list[tuple[int, int]], depth: int) -> int:
    """The set live at the target of a branch of ``depth`` (0: the innermost construct); past the outermost
    construct a branch is a return."""
    return labels[-1 - depth][1] if depth < len(labels) else 0
