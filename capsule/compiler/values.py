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

from capsule.bpf.asm import R1, R2, R3, R4, R5, R6, R7, R9, Reg, ldx, st, stx
from capsule.bpf.insn import Insn
from capsule.wasm import Function, Op, ValType

from . import abi

FRAME: Reg = R9  # the current function's frame (PTR_TO_ARENA)
STACK_REGS: tuple[Reg, ...] = (R6, R7, R1, R2, R3, R4, R5)
CALLER_SAVED = frozenset({R1, R2, R3, R4, R5})


def load_frame(dst: Reg, off: int) -> Insn:
    """``dst = frame[off]`` (8 bytes). Frames may be larger than a 16-bit offset reaches (thousands of locals,
    deep operand stacks): such accesses are widened once the function is lowered (``Code.widen_offsets``)."""
    return ldx(8, dst, FRAME, off, wide=True)


def store_frame(off: int, src: Reg) -> Insn:
    """``frame[off] = src`` (8 bytes; see ``load_frame``)."""
    return stx(8, FRAME, off, src, wide=True)


def store_frame_imm(off: int, imm: int) -> Insn:
    """``frame[off] = imm`` (8 bytes, sign-extended; see ``load_frame``)."""
    return st(8, FRAME, off, imm, wide=True)


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


@dataclass(frozen=True)
class Local:
    """The current value of local ``n``, not copied anywhere yet (a ``local.get`` costs nothing until its value
    is consumed, usually straight from the local's register). Placed before the local changes or a join."""

    type: ValType
    n: int


Entry = Const | Slot | Local


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


# registers for locals, callee-saved first (they survive BPF calls of leaves, soft-float and helpers; the
# caller-saved ones are saved around such calls)
LOCAL_REGS: tuple[Reg, ...] = (R6, R7, R5, R4, R3)
LOOP_WEIGHT = 8  # a use inside a loop counts this many times per loop level (up to MAX_LOOP_LEVELS)
MAX_LOOP_LEVELS = 3
MIN_USES = 3  # a local needs a few uses to pay for its load and store at region boundaries
MIN_LOOP_USES = LOOP_WEIGHT  # and a caller-saved register only for one used inside a loop


def register_plan(func: Function) -> tuple[dict[int, Reg], tuple[Reg, ...]]:
    """Which locals live in registers, and which registers the operand stack gets.

    The most used locals win, a use inside a loop counting LOOP_WEIGHT times per level of loops around it.
    Locals written inside loops are candidates too: what keeps the verifier's states around a loop converging
    is that every loop is entered through the frame (each register local stored and loaded back, so that it
    is a scalar the verifier knows nothing about at the loop head) and that its back-edge is a may_goto, where
    the verifier prunes a later iteration whose values lie within an earlier one's (``control.loop``)."""
    uses: dict[int, int] = {}
    open_: list[int] = []  # opcodes of the open blocks, to know how many loops are around an instruction
    for ins in func.body:
        if ins.op in (Op.BLOCK, Op.LOOP, Op.IF):
            open_.append(ins.op)
        elif ins.op == Op.END and open_:
            open_.pop()
        elif ins.op in (Op.LOCAL_GET, Op.LOCAL_SET, Op.LOCAL_TEE):
            n = ins.imm
            assert isinstance(n, int)
            depth = min(MAX_LOOP_LEVELS, open_.count(Op.LOOP))
            uses[n] = uses.get(n, 0) + LOOP_WEIGHT ** depth
    ranked = sorted(uses.items(), key=lambda kv: (-kv[1], kv[0]))
    local_regs: dict[int, Reg] = {}
    for n, weight in ranked:
        if len(local_regs) == len(LOCAL_REGS):
            break
        reg = LOCAL_REGS[len(local_regs)]
        if weight < (MIN_USES if reg not in CALLER_SAVED else MIN_LOOP_USES):
            break
        local_regs[n] = reg
    taken = set(local_regs.values())
    return local_regs, tuple(r for r in STACK_REGS if r not in taken)
