"""Floating point: the sign-bit operations inline, everything else a call of a soft-float library function.

BPF has no floating point. ``neg``, ``abs`` and ``copysign`` only touch the sign bit, so they are a few ALU
instructions. Every other float instruction calls a global BPF function of ``capsule.guest.softfloat`` (IEEE
754 in integer code, bit-exact with wasmtime): arguments in r1..r5, the result in r0. The call does not go
through the software stack: only the caller-saved stack registers below the arguments are saved around it.
Trapping float-to-int conversions first trap on NaN ("invalid conversion to integer"), then ask the library
whether the value is in range ("integer overflow"), then take the saturating conversion's value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsule.bpf.asm import R1, R2, R3, R4, R5, alu, call, jmp, ld_imm64, ldx, mov, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import Instr, Op, ValType, op_name

from . import abi
from .ops import borrow
from .values import CALLER_SAVED, FRAME, T0, T1, Slot

if TYPE_CHECKING:
    from .function import FunctionCompiler

F32, F64, I32, I64 = ValType.F32, ValType.F64, ValType.I32, ValType.I64
ARG_REGS = (R1, R2, R3, R4, R5)
LIB_PREFIX = "capsule_lib."  # label of a library function in the assembled program


def result_type(mnemonic: str) -> ValType:
    """The wasm type an operation returns, from its mnemonic."""
    head, _, rest = mnemonic.partition(".")
    if rest in ("eq", "ne", "lt", "gt", "le", "ge"):
        return I32
    return {"f32": F32, "f64": F64, "i32": I32, "i64": I64}[head]


def lower(fc: FunctionCompiler, i: int, ins: Instr) -> int | None:
    op = ins.op
    if op in (Op.F32_NEG, Op.F64_NEG, Op.F32_ABS, Op.F64_ABS, Op.F32_COPYSIGN, Op.F64_COPYSIGN):
        sign_op(fc, op)
        return i + 1
    from capsule.guest.softfloat import TRAP_CHECKS, WASM_OPS

    name = op_name(op)
    if name not in WASM_OPS:
        return None
    fn = WASM_OPS[name]
    nargs = 1 if any(k in name for k in ("convert", "trunc", "promote", "demote", "sqrt", "ceil", "floor",
                                           "nearest")) else 2
    if name in TRAP_CHECKS:
        trapping_conversion(fc, name, fn, TRAP_CHECKS[name])
    else:
        library_call(fc, fn, nargs, result_type(name))
    return i + 1


def sign_op(fc: FunctionCompiler, op: int) -> None:
    w32 = op in (Op.F32_NEG, Op.F32_ABS, Op.F32_COPYSIGN)
    t = F32 if w32 else F64
    if op in (Op.F32_COPYSIGN, Op.F64_COPYSIGN):
        bs, b = fc.pop()
    slot, a = fc.pop()
    fc.push(a)
    dst = fc.dst(slot)
    fc.read_into(dst, slot, a)
    if op == Op.F32_NEG:
        fc.emit(alu(Alu.XOR, dst, 0x8000_0000, w32=True))
    elif op == Op.F32_ABS:
        fc.emit(alu(Alu.AND, dst, 0x7FFF_FFFF, w32=True))
    elif op in (Op.F64_NEG, Op.F64_ABS):
        with borrow(fc, {dst}) as tmp:
            if op == Op.F64_NEG:
                fc.emit(mov(tmp, 1), alu(Alu.LSH, tmp, 63), alu(Alu.XOR, dst, tmp))
            else:
                fc.emit(alu(Alu.LSH, dst, 1), alu(Alu.RSH, dst, 1))
    else:  # copysign: a's magnitude, b's sign
        rb = fc.read(bs, b, T1)
        with borrow(fc, {dst, rb}) as tmp:
            fc.emit(mov(tmp, rb))
            if w32:
                fc.emit(alu(Alu.AND, dst, 0x7FFF_FFFF, w32=True), alu(Alu.AND, tmp, 0x8000_0000, w32=True),
                        alu(Alu.OR, dst, tmp, w32=True))
            else:
                fc.emit(alu(Alu.LSH, dst, 1), alu(Alu.RSH, dst, 1), alu(Alu.RSH, tmp, 63), alu(Alu.LSH, tmp, 63),
                        alu(Alu.OR, dst, tmp))
    fc.finish(slot, dst, t)


def library_call(fc: FunctionCompiler, fn: str, nargs: int, rtype: ValType, *, keep_args: bool = False) -> None:
    """``result = fn(top nargs values)``: the arguments go through their frame slots into r1..rn (so their
    homes may be any registers), the caller-saved stack registers below them are saved around the call."""
    h = len(fc.stack)
    base = h - nargs
    fc.materialize_all()
    for j in range(nargs):
        slot = base + j
        r = fc.home(slot)
        if r is not None:
            fc.emit(stx(8, FRAME, fc.spill_off(slot), r))
    fc.spill_regs(base, only=CALLER_SAVED)
    for j in range(nargs):
        fc.emit(ldx(8, ARG_REGS[j], FRAME, fc.spill_off(base + j)))
    fc.info.library_used.add(fn)
    fc.emit(call(LIB_PREFIX + fn))
    fc.reload_regs(base, only=CALLER_SAVED)
    if keep_args:
        fc.reload_regs(h, only=CALLER_SAVED)  # the arguments' registers too (they stay on the stack)
        fc.max_stack = max(fc.max_stack, h + 1)
        fc.emit(stx(8, FRAME, fc.spill_off(h), T0))  # the result waits in the first free slot
        return
    fc.stack[base:] = []
    slot = fc.push(Slot(rtype))
    dst = fc.dst(slot)
    fc.emit(mov(dst, T0))
    fc.finish(slot, dst, rtype)


def trapping_conversion(fc: FunctionCompiler, name: str, value_fn: str, check_fn: str) -> None:
    """i32/i64.trunc_f32/f64_s/u: NaN traps as an invalid conversion, out of range as an overflow."""
    f64 = "_f64_" in name
    slot, e = fc.pop()
    fc.push(e)
    fc.materialize(slot)
    r = fc.read(slot, fc.stack[slot], T0)
    # NaN: exponent all ones and a non-zero fraction, i.e. |x| above infinity's bit pattern
    fc.emit(mov(T1, r))
    if f64:
        fc.emit(alu(Alu.LSH, T1, 1), ld_imm64(T0, 0xFFE0_0000_0000_0000))
        fc.emit(jmp(Jmp.JGT, T1, T0, fc.trap_label(abi.Trap.BAD_CONVERSION)))
    else:
        fc.emit(alu(Alu.AND, T1, 0x7FFF_FFFF, w32=True),
                jmp(Jmp.JGT, T1, 0x7F80_0000, fc.trap_label(abi.Trap.BAD_CONVERSION), w32=True))
    library_call(fc, check_fn, 1, I32, keep_args=True)
    fc.emit(ldx(8, T0, FRAME, fc.spill_off(len(fc.stack))),
            jmp(Jmp.JEQ, T0, 0, fc.trap_label(abi.Trap.INT_OVERFLOW)))
    library_call(fc, value_fn, 1, result_type(name))
