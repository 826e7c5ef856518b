"""What every instruction-selection module shares: the scratch registers, constants as immediates or in a
register.

Lowering code gets its operands from the operand stack (``stack``) and computes in their homes; T0 and T1 are
its scratch registers. When both are taken (operands deep in the stack live in the frame), ``borrow`` lends
a stack register for the duration, saved to the BPF stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from capsule.bpf.asm import FP, R0, R8, Reg, ld_imm64, ldx, mov, stx
from capsule.bpf.insn import Insn
from capsule.ints import MASK32, MASK64, fits_signed, signed

from .abi import BPF_BORROW
from .values import STACK_REGS, Const, Entry, is64

T0: Reg = R0  # scratch (and what a BPF call returns)
T1: Reg = R8  # scratch

class Emitter(Protocol):
    """Where instructions go: the code of the function being lowered."""

    def emit(self, *insns: Insn) -> None: ...

    def just_emitted(self, insn: Insn) -> bool:
        """Whether ``insn`` is the last instruction and nothing can jump in after it."""
        ...

    def retract(self, insn: Insn) -> None:
        """Remove ``insn``, which ``just_emitted`` says is the last instruction."""
        ...


def imm_of(e: Entry, w32: bool) -> int | None:
    """The immediate form of a constant operand, if BPF has one for this width (ALU and jump immediates are
    32 bits, sign-extended in 64-bit operations)."""
    if not isinstance(e, Const):
        return None
    if w32:
        return e.bits & MASK32
    v = signed(e.bits, 64)
    return v if fits_signed(v, 32) else None


def slot_imm(c: Const) -> int | None:
    """The immediate of an 8-byte ``st`` that writes the slot image of ``c`` (an i32 is zero-extended, so a
    negative one has no such immediate), or None."""
    v = signed(c.bits, 64) if is64(c.type) else c.bits & MASK32
    return v if fits_signed(v, 32) else None


def load_const(out: Emitter, reg: Reg, c: Const) -> None:
    """``reg = c``: a mov when the value fits a sign-extended immediate, else a 64-bit load."""
    if is64(c.type):
        v = signed(c.bits, 64)
        out.emit(mov(reg, v) if fits_signed(v, 32) else ld_imm64(reg, c.bits & MASK64))
    else:
        out.emit(mov(reg, c.bits & MASK32, w32=True))


@contextmanager
def borrow(out: Emitter, avoid: set[Reg]) -> Iterator[Reg]:
    """A scratch register not in ``avoid``: T0/T1 if free, else a stack register saved to the BPF stack."""
    for r in (T1, T0):
        if r not in avoid:
            yield r
            return
    r = next(x for x in STACK_REGS if x not in avoid)
    out.emit(stx(8, FP, BPF_BORROW, r))
    yield r
    out.emit(ldx(8, r, FP, BPF_BORROW))
