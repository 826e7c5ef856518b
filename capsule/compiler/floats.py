"""Floating point: the sign-bit operations inline, everything else a call of a soft-float library function.

BPF has no floating point. ``neg``, ``abs`` and ``copysign`` only touch the sign bit, so they are a few ALU
instructions. Every other float instruction calls a global BPF function of ``capsule.guest.softfloat`` (IEEE
754 in integer code, bit-exact with wasmtime): arguments in r1..r5, the result in r0. The call does not go
through the software stack: only the caller-saved stack registers below the arguments are saved around it.
Trapping float-to-int conversions first trap on NaN ("invalid conversion to integer"), then ask the library
whether the value is in range ("integer overflow"), then take the saturating conversion's value.
"""

from __future__ import annotations

from capsule.bpf.asm import R1, R2, R3, R4, R5, alu, call, jmp, ld_imm64, mov
from capsule.bpf.opcodes import Alu, Jmp
from capsule.guest.softfloat import TRAP_CHECKS, WASM_OPS
from capsule.wasm import Op, ValType, op_name

from . import abi
from .emit import T0, T1, borrow
from .state import FunctionState, Lowering
from .values import CALLER_SAVED, Slot, load_frame, store_frame

F32, F64, I32, I64 = ValType.F32, ValType.F64, ValType.I32, ValType.I64
ARG_REGS = (R1, R2, R3, R4, R5)
LIB_PREFIX = "capsule_lib."  # label of a library function in the assembled program


def result_type(mnemonic: str) -> ValType:
    """The wasm type an operation returns, from its mnemonic."""
    head, _, rest = mnemonic.partition(".")
    if rest in ("eq", "ne", "lt", "gt", "le", "ge"):
        return I32
    return {"f32": F32, "f64": F64, "i32": I32, "i64": I64}[head]


def sign_op(fs: FunctionState, op: int) -> None:
    w32 = op in (Op.F32_NEG, Op.F32_ABS, Op.F32_COPYSIGN)
    t = F32 if w32 else F64
    sign = fs.stack.pop() if op in (Op.F32_COPYSIGN, Op.F64_COPYSIGN) else None
    slot, a = fs.stack.pop()
    fs.stack.push(a)
    dst = fs.stack.dst(slot)
    fs.stack.read_into(dst, slot, a)
    if op == Op.F32_NEG:
        fs.emit(alu(Alu.XOR, dst, 0x8000_0000, w32=True))
    elif op == Op.F32_ABS:
        fs.emit(alu(Alu.AND, dst, 0x7FFF_FFFF, w32=True))
    elif op in (Op.F64_NEG, Op.F64_ABS):
        with borrow(fs, {dst}) as tmp:
            if op == Op.F64_NEG:
                fs.emit(mov(tmp, 1), alu(Alu.LSH, tmp, 63), alu(Alu.XOR, dst, tmp))
            else:
                fs.emit(alu(Alu.LSH, dst, 1), alu(Alu.RSH, dst, 1))
    else:  # copysign: a's magnitude, b's sign
        assert sign is not None
        bs, b = sign
        rb = fs.stack.read(bs, b, T1)
        with borrow(fs, {dst, rb}) as tmp:
            fs.emit(mov(tmp, rb))
            if w32:
                fs.emit(alu(Alu.AND, dst, 0x7FFF_FFFF, w32=True), alu(Alu.AND, tmp, 0x8000_0000, w32=True),
                        alu(Alu.OR, dst, tmp, w32=True))
            else:
                fs.emit(alu(Alu.LSH, dst, 1), alu(Alu.RSH, dst, 1), alu(Alu.RSH, tmp, 63), alu(Alu.LSH, tmp, 63),
                        alu(Alu.OR, dst, tmp))
    fs.stack.finish(slot, dst, t)


def library_call(fs: FunctionState, fn: str, nargs: int, rtype: ValType, *, keep_args: bool = False) -> None:
    """``result = fn(top nargs values)``: the arguments go through their frame slots into r1..rn (so their
    homes may be any registers), the caller-saved stack registers below them are saved around the call."""
    h = len(fs.stack)
    base = h - nargs
    fs.stack.materialize_all()
    for j in range(nargs):
        slot = base + j
        r = fs.stack.home(slot)
        if r is not None:
            fs.emit(store_frame(fs.stack.spill_off(slot), r))
    fs.stack.spill_regs(base, only=CALLER_SAVED)
    for j in range(nargs):
        fs.emit(load_frame(ARG_REGS[j], fs.stack.spill_off(base + j)))
    fs.info.library_used.add(fn)
    fs.emit(call(LIB_PREFIX + fn))
    fs.stack.reload_regs(base, only=CALLER_SAVED)
    if keep_args:
        fs.stack.reload_regs(h, only=CALLER_SAVED)  # the arguments' registers too (they stay on the stack)
        fs.stack.reserve(h + 1)
        fs.emit(store_frame(fs.stack.spill_off(h), T0))  # the result waits in the first free slot
        return
    fs.stack.truncate(base)
    slot = fs.stack.push(Slot(rtype))
    dst = fs.stack.dst(slot)
    fs.emit(mov(dst, T0))
    fs.stack.finish(slot, dst, rtype)


def trapping_conversion(fs: FunctionState, name: str, value_fn: str, check_fn: str) -> None:
    """i32/i64.trunc_f32/f64_s/u: NaN traps as an invalid conversion, out of range as an overflow."""
    f64 = "_f64_" in name
    slot, e = fs.stack.pop()
    fs.stack.push(e)
    fs.stack.materialize(slot)
    r = fs.stack.read(slot, fs.stack[slot], T0)
    # NaN: exponent all ones and a non-zero fraction, i.e. |x| above infinity's bit pattern
    fs.emit(mov(T1, r))
    if f64:
        fs.emit(alu(Alu.LSH, T1, 1), ld_imm64(T0, 0xFFE0_0000_0000_0000))
        fs.emit(jmp(Jmp.JGT, T1, T0, fs.trap_label(abi.Trap.BAD_CONVERSION)))
    else:
        fs.emit(alu(Alu.AND, T1, 0x7FFF_FFFF, w32=True),
                jmp(Jmp.JGT, T1, 0x7F80_0000, fs.trap_label(abi.Trap.BAD_CONVERSION), w32=True))
    library_call(fs, check_fn, 1, I32, keep_args=True)
    fs.emit(load_frame(T0, fs.stack.spill_off(len(fs.stack))),
            jmp(Jmp.JEQ, T0, 0, fs.trap_label(abi.Trap.INT_OVERFLOW)))
    library_call(fs, value_fn, 1, result_type(name))


_SIGN_OPS = (Op.F32_NEG, Op.F64_NEG, Op.F32_ABS, Op.F64_ABS, Op.F32_COPYSIGN, Op.F64_COPYSIGN)
_UNARY = ("convert", "trunc", "promote", "demote", "sqrt", "ceil", "floor", "nearest")


def _library_op(fn: str, nargs: int, rtype: ValType) -> Lowering:
    return lambda fs, ins: library_call(fs, fn, nargs, rtype)


def _trapping_op(name: str, value_fn: str, check_fn: str) -> Lowering:
    return lambda fs, ins: trapping_conversion(fs, name, value_fn, check_fn)


def _lowerings() -> dict[int, Lowering]:
    table: dict[int, Lowering] = {op: lambda fs, ins: sign_op(fs, ins.op) for op in _SIGN_OPS}
    for op in Op:
        name = op_name(op)
        fn = WASM_OPS.get(name)
        if fn is None:
            continue
        check = TRAP_CHECKS.get(name)
        if check is not None:
            table[op] = _trapping_op(name, fn, check)
        else:
            table[op] = _library_op(fn, 1 if any(k in name for k in _UNARY) else 2, result_type(name))
    return table


LOWERINGS: dict[int, Lowering] = _lowerings()
