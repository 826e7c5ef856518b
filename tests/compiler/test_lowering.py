"""The pieces of lowering on their own: the one opcode table, the operand stack, and the shared emit helpers
(no kernel needed)."""

from __future__ import annotations

import pytest

from capsule.bpf.asm import FP, R1, R2, R3, R4, R5, R6, R7, Reg, ld_imm64, ldx, mov, stx
from capsule.bpf.insn import Insn
from capsule.compiler import CompileError, abi, compile_module
from capsule.compiler.emit import T0, T1, borrow, imm_of, load_const, slot_imm
from capsule.compiler.function import LOWERINGS
from capsule.compiler.stack import OperandStack
from capsule.compiler.values import FRAME, STACK_REGS, Const, Slot
from capsule.wasm import Op, ValType, load, op_name
from tests.wasm.wasm_build import wat

I32, I64 = ValType.I32, ValType.I64

#: what the validator accepts and the compiler does not lower yet (docs/COMPILER.md, "What is not done yet")
NOT_LOWERED = {"memory.init", "data.drop", "table.init", "elem.drop", "table.copy", "table.grow", "table.fill"}


class Out:
    """An emitter that keeps what it is given."""

    def __init__(self) -> None:
        self.insns: list[Insn] = []

    def emit(self, *insns: Insn) -> None:
        self.insns.extend(insns)


def test_one_table_covers_every_opcode_but_the_known_few() -> None:
    missing = {op_name(op) for op in Op if op not in LOWERINGS}
    assert missing == NOT_LOWERED
    assert all(callable(f) for f in LOWERINGS.values())


@pytest.mark.parametrize(("body", "name"), [
    ("(table.grow 0 (ref.null func) (i32.const 1)) drop", "table.grow"),
    ("(data.drop 0)", "data.drop"),
    ("(memory.init 0 (i32.const 0) (i32.const 0) (i32.const 1))", "memory.init"),
])
def test_an_instruction_not_lowered_is_named_with_its_function(body: str, name: str) -> None:
    module = load(wat(f'(module (memory 1) (table 1 funcref) (data "x") (func $lonely {body}) '
                      '(export "f" (func $lonely)))'))
    with pytest.raises(CompileError, match=f"instruction {name}") as e:
        compile_module(module)
    assert "lonely" in str(e.value)


def _stack(nlocals: int = 2, regs: tuple[Reg, ...] = STACK_REGS) -> tuple[OperandStack, Out]:
    out = Out()
    return OperandStack(out, nlocals, regs, {}), out


def test_constants_wait_until_they_are_placed() -> None:
    stack, out = _stack()
    stack.push(Const(I32, 7))
    stack.push(Const(I64, 1 << 40))
    assert out.insns == []
    stack.materialize_all()
    assert out.insns == [mov(STACK_REGS[0], 7, w32=True), ld_imm64(STACK_REGS[1], 1 << 40)]
    assert stack[0] == Slot(I32) and stack[1] == Slot(I64)


def test_slots_above_the_registers_live_in_the_frame() -> None:
    stack, out = _stack(nlocals=3, regs=(R6,))
    stack.push(Slot(I32))
    slot = stack.push(Slot(I32))
    assert stack.home(0) == R6 and stack.home(slot) is None
    off = abi.FRAME_LOCALS + abi.SLOT * (3 + slot)  # spill slots follow the locals
    assert stack.spill_off(slot) == off
    assert stack.read(slot, stack[slot], T1) == T1 and out.insns == [ldx(8, T1, FRAME, off)]
    out.insns.clear()
    stack.finish(slot, T0, I64)  # a result for a frame-homed slot is stored there
    assert out.insns == [stx(8, FRAME, off, T0)] and stack[slot] == Slot(I64) and len(stack) == 2
    assert stack.max_height == 2


def test_region_boundaries_spill_and_reload_registers_and_register_locals() -> None:
    out = Out()
    stack = OperandStack(out, 4, (R1, R2), {3: R7})
    stack.push(Slot(I32))
    stack.push(Slot(I32))
    stack.spill_regs(2)
    assert out.insns == [stx(8, FRAME, stack.spill_off(0), R1), stx(8, FRAME, stack.spill_off(1), R2),
                         stx(8, FRAME, abi.FRAME_LOCALS + abi.SLOT * 3, R7)]
    out.insns.clear()
    stack.reload_regs(2, only=frozenset({R2}))  # around a call: only the clobbered registers, locals stay
    assert out.insns == [ldx(8, R2, FRAME, stack.spill_off(1))]


@pytest.mark.parametrize(("c", "w32", "imm"), [
    (Const(I32, 0xFFFF_FFFF), True, 0xFFFF_FFFF),  # a 32-bit operation takes the bits
    (Const(I64, (1 << 64) - 1), False, -1),  # -1 sign-extends from 32 bits
    (Const(I64, 1 << 31), False, None),  # does not: needs a register
    (Slot(I32), True, None),
])
def test_imm_of(c: Const | Slot, w32: bool, imm: int | None) -> None:
    assert imm_of(c, w32) == imm


def test_slot_images_of_constants() -> None:
    assert slot_imm(Const(I32, 5)) == 5
    assert slot_imm(Const(I32, 0xFFFF_FFFF)) is None  # an i32 is zero-extended in its 8-byte slot
    assert slot_imm(Const(I64, (1 << 64) - 2)) == -2
    out = Out()
    load_const(out, R3, Const(I64, (1 << 64) - 2))
    load_const(out, R3, Const(I64, 1 << 33))
    assert out.insns == [mov(R3, -2), ld_imm64(R3, 1 << 33)]


def test_borrow_lends_a_stack_register_when_both_scratch_registers_are_taken() -> None:
    out = Out()
    with borrow(out, {T1}) as r:
        assert r == T0 and out.insns == []
    with borrow(out, {T0, T1, R6, R7, R1}) as r:
        assert r == R2
        out.emit(mov(r, 1))
    assert out.insns == [stx(8, FP, abi.BPF_BORROW, R2), mov(R2, 1), ldx(8, R2, FP, abi.BPF_BORROW)]
    assert {R4, R5} <= set(STACK_REGS)
