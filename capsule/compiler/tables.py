"""Tables and references. A reference is held as an i32: a function index + 1, and 0 for null, which is
also what a table element holds (tables live in the runtime area of the window, ``abi.TABLES``)."""

from __future__ import annotations

from capsule.bpf.asm import FP, alu, jmp, ldx, mov, st, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import Instr, Op, ValType

from . import abi
from .abi import BPF_RUNTIME
from .emit import T0, T1
from .integers import test_zero
from .state import FunctionState, Lowering
from .values import Const, Slot


def table_size(fs: FunctionState, ins: Instr) -> None:
    slot = fs.stack.push(Slot(ValType.I32))
    dst = fs.stack.dst(slot)
    fs.emit(ldx(8, dst, FP, BPF_RUNTIME), ldx(8, dst, dst, abi.CTRL_TABLE0_SIZE + 8 * ins.imm_as(int)))
    fs.stack.finish(slot, dst, ValType.I32)


def table_access(fs: FunctionState, table: int, is_set: bool) -> None:
    """table.get / table.set, trapping on an index past the table's current size."""
    value = fs.stack.pop() if is_set else None
    is_, ix = fs.stack.pop()
    if not is_set:
        fs.stack.push(ix)
    ri = fs.stack.read(is_, ix, T0)
    fs.emit(mov(T0, ri), ldx(8, T1, FP, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_TABLE0_SIZE + 8 * table),
            jmp(Jmp.JGE, T0, T1, fs.trap_label(abi.Trap.TABLE_OUT_OF_BOUNDS)))
    fs.emit(alu(Alu.LSH, T0, 3), alu(Alu.ADD, T0, abi.TABLES - abi.RT_BASE + table * abi.TABLE_STRIDE),
            *fs.info.window.bounded("runtime", T0), ldx(8, T1, FP, BPF_RUNTIME), alu(Alu.ADD, T1, T0))
    if value is not None:
        vs, v = value
        if isinstance(v, Const):
            fs.emit(st(8, T1, 0, v.bits))
        else:
            fs.emit(mov(T0, T1))
            fs.emit(stx(8, T0, 0, fs.stack.read(vs, v, T1)))
    else:
        dst = fs.stack.dst(is_)
        fs.emit(ldx(8, dst, T1, 0))
        fs.stack.finish(is_, dst, ValType.FUNCREF)


def table_get(fs: FunctionState, ins: Instr) -> None:
    table_access(fs, ins.imm_as(int), is_set=False)


def table_set(fs: FunctionState, ins: Instr) -> None:
    table_access(fs, ins.imm_as(int), is_set=True)


def ref_null(fs: FunctionState, ins: Instr) -> None:
    fs.stack.push(Const(ValType.I32, 0))


def ref_func(fs: FunctionState, ins: Instr) -> None:
    fs.stack.push(Const(ValType.I32, ins.imm_as(int) + 1))


def ref_is_null(fs: FunctionState, ins: Instr) -> None:
    test_zero(fs, ValType.I32)


LOWERINGS: dict[int, Lowering] = {
    Op.TABLE_SIZE: table_size, Op.TABLE_GET: table_get, Op.TABLE_SET: table_set, Op.REF_NULL: ref_null,
    Op.REF_FUNC: ref_func, Op.REF_IS_NULL: ref_is_null,
}
