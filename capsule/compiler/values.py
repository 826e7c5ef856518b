"""Where wasm values live while a function's code runs: the operand stack mapped onto BPF registers and frame
slots, and the fixed registers every region relies on.

Stack slot ``i`` (0 = bottom of the function's operand stack) has a *home*: one of ``STACK_REGS`` for the
lowest slots, a frame slot in the arena above that. Every slot also has a *spill* location in the frame, where
its value waits while the fiber is between regions (the registers do not survive the dispatcher). Because the
home of a slot depends only on its height, values meet at block boundaries without moves; constants are kept
lazily (``Const``) and materialised before any control-flow join.

An i32 is always held zero-extended in a 64-bit register and stored as 8 bytes; an f32 likewise as its bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsule.bpf.asm import R1, R2, R3, R4, R5, R6, R7, R9, Reg
from capsule.wasm import Function, Op, ValType

from . import abi

FRAME: Reg = R9  # the current function's frame (PTR_TO_ARENA)
STACK_REGS: tuple[Reg, ...] = (R6, R7, R1, R2, R3, R4, R5)
CALLER_SAVED = frozenset({R1, R2, R3, R4, R5})


def is64(t: ValType) -> bool:
    return t in (ValType.I64, ValType.F64)


@dataclass(frozen=True)
class Const:
    """A constant not yet placed anywhere: ``bits`` is the raw value (u32 or u64 two's complement)."""

    type: ValType
    bits: int


@dataclass(frozen=True)
class Slot:
    """A value in its stack slot's home."""

    type: ValType


Entry = Const | Slot


class FrameLayout:
    """Offsets in a function's software-stack frame (see ``abi``)."""

    def __init__(self, nlocals: int, max_stack: int) -> None:
        self.nlocals = nlocals
        self.max_stack = max_stack
        self.size = abi.FRAME_LOCALS + abi.SLOT * (nlocals + max_stack)

    def local(self, i: int) -> int:
        return abi.FRAME_LOCALS + abi.SLOT * i

    def spill(self, slot: int) -> int:
        return abi.FRAME_LOCALS + abi.SLOT * (self.nlocals + slot)


LOCAL_REGS: tuple[Reg, ...] = (R6, R7)  # callee-saved: they survive calls to leaf functions
_LOOP_WEIGHT = 8


def register_plan(func: Function) -> tuple[dict[int, Reg], tuple[Reg, ...]]:
    """Which locals live in registers, and which registers the operand stack gets.

    Candidates are locals never written inside a loop (parameters, loop invariants): a local updated around a
    loop would carry ever more exact values into the verifier's next pass over the loop (counters doubling,
    pointers stepping) and its states would stop converging, where a local reloaded from the frame each
    iteration is a scalar the verifier knows nothing about. Among candidates, the most used win (uses inside
    loops count more); a local needs a few uses to pay for its load and store at region boundaries."""
    uses: dict[int, int] = {}
    written_in_loop: set[int] = set()
    open_: list[int] = []  # opcodes of the open blocks, to know when the innermost loop ends
    for ins in func.body:
        if ins.op in (Op.BLOCK, Op.LOOP, Op.IF):
            open_.append(ins.op)
        elif ins.op == Op.END and open_:
            open_.pop()
        elif ins.op in (Op.LOCAL_GET, Op.LOCAL_SET, Op.LOCAL_TEE):
            n = ins.imm
            assert isinstance(n, int)
            in_loop = Op.LOOP in open_
            uses[n] = uses.get(n, 0) + (_LOOP_WEIGHT if in_loop else 1)
            if in_loop and ins.op != Op.LOCAL_GET:
                written_in_loop.add(n)
    ranked = sorted((kv for kv in uses.items() if kv[0] not in written_in_loop), key=lambda kv: (-kv[1], kv[0]))
    hot = [n for n, c in ranked if c >= 3][: len(LOCAL_REGS)]
    local_regs = {n: LOCAL_REGS[k] for k, n in enumerate(hot)}
    taken = set(local_regs.values())
    return local_regs, tuple(r for r in STACK_REGS if r not in taken)
