"""Instruction selection for wasm's integer instructions and constants: arithmetic with wasm's traps,
comparisons (fused with a following ``br_if``/``if``), bit counting, rotations, and conversions between
integer widths. Floats are ``floats``, memory ``memory``, references and tables ``tables``.

Operands come from the stack entries: a constant becomes an immediate where BPF has a form for it.
"""

from __future__ import annotations

from collections.abc import Callable

from capsule.bpf.asm import FP, Reg, alu, ja, jmp, ld_imm64, ldx, mov, movsx, neg, sdiv, smod, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.ints import MASK32, MASK64, fits_signed, signed
from capsule.wasm import Instr, Op, ValType

from . import abi
from .abi import BPF_TEMP
from .control import branch_if, open_if
from .emit import T0, T1, borrow, imm_of
from .state import FunctionState, Lowering
from .values import Const, Local, Slot

I32, I64 = ValType.I32, ValType.I64
F32, F64 = ValType.F32, ValType.F64

_ALU = {
    Op.I32_ADD: (Alu.ADD, True), Op.I32_SUB: (Alu.SUB, True), Op.I32_MUL: (Alu.MUL, True),
    Op.I32_AND: (Alu.AND, True), Op.I32_OR: (Alu.OR, True), Op.I32_XOR: (Alu.XOR, True),
    Op.I32_SHL: (Alu.LSH, True), Op.I32_SHR_U: (Alu.RSH, True), Op.I32_SHR_S: (Alu.ARSH, True),
    Op.I64_ADD: (Alu.ADD, False), Op.I64_SUB: (Alu.SUB, False), Op.I64_MUL: (Alu.MUL, False),
    Op.I64_AND: (Alu.AND, False), Op.I64_OR: (Alu.OR, False), Op.I64_XOR: (Alu.XOR, False),
    Op.I64_SHL: (Alu.LSH, False), Op.I64_SHR_U: (Alu.RSH, False), Op.I64_SHR_S: (Alu.ARSH, False),
}
_SHIFTS = {Alu.LSH, Alu.RSH, Alu.ARSH}

_CMP = {
    Op.I32_EQ: (Jmp.JEQ, True), Op.I32_NE: (Jmp.JNE, True), Op.I32_LT_S: (Jmp.JSLT, True),
    Op.I32_LT_U: (Jmp.JLT, True), Op.I32_GT_S: (Jmp.JSGT, True), Op.I32_GT_U: (Jmp.JGT, True),
    Op.I32_LE_S: (Jmp.JSLE, True), Op.I32_LE_U: (Jmp.JLE, True), Op.I32_GE_S: (Jmp.JSGE, True),
    Op.I32_GE_U: (Jmp.JGE, True),
    Op.I64_EQ: (Jmp.JEQ, False), Op.I64_NE: (Jmp.JNE, False), Op.I64_LT_S: (Jmp.JSLT, False),
    Op.I64_LT_U: (Jmp.JLT, False), Op.I64_GT_S: (Jmp.JSGT, False), Op.I64_GT_U: (Jmp.JGT, False),
    Op.I64_LE_S: (Jmp.JSLE, False), Op.I64_LE_U: (Jmp.JLE, False), Op.I64_GE_S: (Jmp.JSGE, False),
    Op.I64_GE_U: (Jmp.JGE, False),
}
_INVERSE = {
    Jmp.JEQ: Jmp.JNE, Jmp.JNE: Jmp.JEQ, Jmp.JLT: Jmp.JGE, Jmp.JGE: Jmp.JLT, Jmp.JGT: Jmp.JLE,
    Jmp.JLE: Jmp.JGT, Jmp.JSLT: Jmp.JSGE, Jmp.JSGE: Jmp.JSLT, Jmp.JSGT: Jmp.JSLE, Jmp.JSLE: Jmp.JSGT,
}
_DIV = {
    Op.I32_DIV_U: ("div_u", True), Op.I32_REM_U: ("rem_u", True), Op.I32_DIV_S: ("div_s", True),
    Op.I32_REM_S: ("rem_s", True), Op.I64_DIV_U: ("div_u", False), Op.I64_REM_U: ("rem_u", False),
    Op.I64_DIV_S: ("div_s", False), Op.I64_REM_S: ("rem_s", False),
}
# reinterpretations and conversions that are a type change only (values are kept as raw bits, zero-extended)
_RETYPE = {
    Op.I32_REINTERPRET_F32: I32, Op.F32_REINTERPRET_I32: F32, Op.I64_REINTERPRET_F64: I64,
    Op.F64_REINTERPRET_I64: F64, Op.I64_EXTEND_I32_U: I64,
}
# sign extensions: (bits, result type)
_SIGN_EXTEND = {
    Op.I64_EXTEND_I32_S: (32, I64), Op.I32_EXTEND8_S: (8, I32), Op.I32_EXTEND16_S: (16, I32),
    Op.I64_EXTEND8_S: (8, I64), Op.I64_EXTEND16_S: (16, I64), Op.I64_EXTEND32_S: (32, I64),
}
_BITCOUNT = (Op.I32_CLZ, Op.I32_CTZ, Op.I32_POPCNT, Op.I64_CLZ, Op.I64_CTZ, Op.I64_POPCNT)
_ROTATE = {Op.I32_ROTL: (True, True), Op.I32_ROTR: (False, True), Op.I64_ROTL: (True, False),
           Op.I64_ROTR: (False, False)}  # (left, w32)


def const(fs: FunctionState, ins: Instr) -> None:
    """A constant stays a ``Const`` (raw bits) until it is needed: often it becomes an immediate."""
    v = ins.imm_as(int)
    if ins.op == Op.I32_CONST:
        fs.stack.push(Const(I32, v & MASK32))
    elif ins.op == Op.I64_CONST:
        fs.stack.push(Const(I64, v & MASK64))
    else:  # f32/f64: the immediate is already the raw bits
        fs.stack.push(Const(F32 if ins.op == Op.F32_CONST else F64, v))


def unary(fs: FunctionState, t: ValType, body: Callable[[Reg], None]) -> None:
    slot, e = fs.stack.pop()
    fs.stack.push(e)  # keep the slot occupied while computing into its home
    dst = fs.stack.result(slot)
    fs.stack.read_into(dst, slot, e, consume=True)
    body(dst)
    fs.stack.finish(slot, dst, t)


def binop(fs: FunctionState, op: Alu, w32: bool) -> None:
    bs, b = fs.stack.pop()
    a_slot = len(fs.stack) - 1
    a = fs.stack[a_slot]
    t = I32 if w32 else I64
    dst = fs.stack.result(a_slot, b)
    imm = imm_of(b, w32)
    if op in _SHIFTS and isinstance(b, Const):
        imm = b.bits & (31 if w32 else 63)
    fs.stack.read_into(dst, a_slot, a, consume=True)
    if imm is not None:
        fs.emit(alu(op, dst, imm, w32=w32))
    else:
        fs.emit(alu(op, dst, fs.stack.read(bs, b, T1, consume=True), w32=w32))
    fs.stack.finish(a_slot, dst, t)


def compare(fs: FunctionState, op: Jmp, w32: bool) -> None:
    """A comparison: fused into a following ``br_if``/``if`` as a conditional jump, else 0/1 in a register."""
    bs, b = fs.stack.pop()
    a_slot, a = fs.stack.pop()
    body = fs.func.body
    i = fs.pos
    nxt = body[i + 1] if i + 1 < len(body) else None

    def test(jop: Jmp, target: str) -> None:
        ra = fs.stack.read(a_slot, a, T0)
        imm = imm_of(b, w32)
        fs.emit(jmp(jop, ra, imm if imm is not None else fs.stack.read(bs, b, T1), target, w32=w32))

    if nxt is not None and nxt.op == Op.BR_IF and not fs.dead:
        fs.pos = i + 1
        c = fs.ctls[-1 - nxt.imm_as(int)]
        branch_if(fs, c, lambda target: test(op, target), lambda target: test(_INVERSE[op], target))
        return
    if nxt is not None and nxt.op == Op.IF:
        fs.pos = i + 1
        open_if(fs, nxt, lambda target: test(_INVERSE[op], target))
        return
    fs.stack.push(a)  # the result goes into a's slot
    dst = fs.stack.dst(a_slot)
    ra = fs.stack.read(a_slot, a, T0)
    imm = imm_of(b, w32)
    rb = imm if imm is not None else fs.stack.read(bs, b, T1)
    fs.emit(jmp(op, ra, rb, 2, w32=w32), mov(dst, 0, w32=True), ja(1), mov(dst, 1, w32=True))
    fs.stack.finish(a_slot, dst, I32)


def test_zero(fs: FunctionState, t: ValType) -> None:
    """eqz (and ref.is_null): a comparison with a zero constant of type ``t``."""
    fs.stack.push(Const(t, 0))
    compare(fs, Jmp.JEQ, t != I64)


def divide(fs: FunctionState, kind: str, w32: bool) -> None:
    """Integer division and remainder with wasm's traps (BPF itself defines x/0 and INT_MIN/-1)."""
    bs, b = fs.stack.pop()
    a_slot = len(fs.stack) - 1
    a = fs.stack[a_slot]
    t = I32 if w32 else I64
    dst = fs.stack.dst(a_slot)
    fs.stack.read_into(dst, a_slot, a)
    imm = imm_of(b, w32)
    if imm is not None and (signed(imm, 32) if w32 else imm) not in (0, -1):
        rb: Reg | int = imm
    else:
        rb = fs.stack.read(bs, b, T1)
        fs.emit(jmp(Jmp.JEQ, rb, 0, fs.trap_label(abi.Trap.INT_DIV_ZERO), w32=w32))
    is_signed = kind.endswith("_s")
    alu_op = Alu.DIV if kind.startswith("div") else Alu.MOD
    if not is_signed:
        fs.emit(alu(alu_op, dst, rb, w32=w32))
    elif not isinstance(rb, Reg):  # a constant divisor other than 0 and -1 (Reg is an int subclass)
        _signed(fs, alu_op == Alu.MOD, dst, rb, w32)
    else:
        ok = fs.fresh("div")
        done = fs.fresh("divd")
        fs.emit(jmp(Jmp.JNE, rb, -1, ok, w32=w32))
        if alu_op == Alu.MOD:  # x rem -1 = 0
            fs.emit(mov(dst, 0), ja(done))
        elif w32:
            fs.emit(jmp(Jmp.JEQ, dst, 0x8000_0000, fs.trap_label(abi.Trap.INT_OVERFLOW), w32=True))
        else:
            with borrow(fs, {dst, rb}) as tmp:  # INT64_MIN is the only x != 0 with x << 1 == 0
                fs.emit(mov(tmp, dst), alu(Alu.LSH, tmp, 1), jmp(Jmp.JNE, tmp, 0, ok),
                        jmp(Jmp.JNE, dst, 0, fs.trap_label(abi.Trap.INT_OVERFLOW)))
        fs.code.label(ok)
        _signed(fs, alu_op == Alu.MOD, dst, rb, w32)
        fs.code.label(done)
    fs.stack.finish(a_slot, dst, t)


def rotate(fs: FunctionState, left: bool, w32: bool) -> None:
    bs, b = fs.stack.pop()
    a_slot = len(fs.stack) - 1
    a = fs.stack[a_slot]
    t = I32 if w32 else I64
    bits = 32 if w32 else 64
    dst = fs.stack.dst(a_slot)
    fs.stack.read_into(dst, a_slot, a)
    first, second = (Alu.LSH, Alu.RSH) if left else (Alu.RSH, Alu.LSH)
    if isinstance(b, Const):
        n = b.bits & (bits - 1)
        if n:
            with borrow(fs, {dst}) as tmp:
                fs.emit(mov(tmp, dst), alu(first, tmp, n, w32=w32), alu(second, dst, bits - n, w32=w32),
                        alu(Alu.OR, dst, tmp, w32=w32))
    else:
        rb = fs.stack.read_owned(bs, b, T1)  # negated below
        with borrow(fs, {dst, rb}) as tmp:
            # x << n | x >> (-n & (bits-1)): BPF masks shift counts to the operand width
            fs.emit(mov(tmp, dst), alu(first, tmp, rb, w32=w32), neg(rb, w32=w32),
                    alu(second, dst, rb, w32=w32), alu(Alu.OR, dst, tmp, w32=w32))
    fs.stack.finish(a_slot, dst, t)


def bitcount(fs: FunctionState, op: int) -> None:
    """clz/ctz/popcnt: BPF has no such instructions; all three reduce to a SWAR popcount."""
    w32 = op in (Op.I32_CLZ, Op.I32_CTZ, Op.I32_POPCNT)
    slot, e = fs.stack.pop()
    fs.stack.push(e)
    t = I32 if w32 else I64
    dst = fs.stack.dst(slot)
    fs.stack.read_into(dst, slot, e)
    with borrow(fs, {dst}) as t1, borrow(fs, {dst, t1}) as t2:
        if op in (Op.I32_CLZ, Op.I64_CLZ):  # smear the highest set bit down, count the zeros above it
            for s in (1, 2, 4, 8, 16) + (() if w32 else (32,)):
                fs.emit(mov(t1, dst), alu(Alu.RSH, t1, s, w32=w32), alu(Alu.OR, dst, t1, w32=w32))
            fs.emit(alu(Alu.XOR, dst, -1, w32=w32))
        elif op in (Op.I32_CTZ, Op.I64_CTZ):  # (x & -x) - 1 has exactly ctz(x) ones
            fs.emit(mov(t1, dst), neg(t1, w32=w32), alu(Alu.AND, dst, t1, w32=w32),
                    alu(Alu.SUB, dst, 1, w32=w32))
        popcount(fs, dst, t1, t2, w32)
    fs.stack.finish(slot, dst, t)


def popcount(fs: FunctionState, x: Reg, t1: Reg, t2: Reg, w32: bool) -> None:
    def mask(v: int) -> Reg | int:
        if w32:
            return v & MASK32
        fs.emit(ld_imm64(t2, v))
        return t2

    m1, m2, m4, h01 = 0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x0101010101010101
    fs.emit(mov(t1, x), alu(Alu.RSH, t1, 1, w32=w32))
    fs.emit(alu(Alu.AND, t1, mask(m1), w32=w32), alu(Alu.SUB, x, t1, w32=w32))
    m = mask(m2)
    fs.emit(mov(t1, x), alu(Alu.AND, t1, m, w32=w32), alu(Alu.RSH, x, 2, w32=w32),
            alu(Alu.AND, x, m, w32=w32), alu(Alu.ADD, x, t1, w32=w32))
    fs.emit(mov(t1, x), alu(Alu.RSH, t1, 4, w32=w32), alu(Alu.ADD, x, t1, w32=w32))
    fs.emit(alu(Alu.AND, x, mask(m4), w32=w32))
    fs.emit(alu(Alu.MUL, x, mask(h01), w32=w32), alu(Alu.RSH, x, 24 if w32 else 56, w32=w32))


def retype(fs: FunctionState, t: ValType) -> None:
    """A conversion that changes only the type: the bits stay as they are."""
    _, e = fs.stack.pop()
    if isinstance(e, Const):
        fs.stack.push(Const(t, e.bits))
    elif isinstance(e, Local):  # the same bits, seen as another type
        fs.stack.push(Local(t, e.n))
    else:
        fs.stack.push(Slot(t))


def wrap(fs: FunctionState) -> None:
    unary(fs, I32, lambda d: fs.emit(mov(d, d, w32=True)))


def sign_extend(fs: FunctionState, bits: int, t: ValType) -> None:
    if fs.opt.cpu >= 4:
        unary(fs, t, lambda d: fs.emit(movsx(d, d, bits, w32=t == I32)))
        return
    width = 32 if t == I32 else 64  # cpu v3: shift the sign bit to the top and back
    unary(fs, t, lambda d: fs.emit(alu(Alu.LSH, d, width - bits, w32=t == I32),
                                   alu(Alu.ARSH, d, width - bits, w32=t == I32)))


def _signed_v3(fs: FunctionState, rem: bool, dst: Reg, rb: Reg | int, w32: bool) -> None:
    """sdiv/smod without cpu v4: the unsigned operation on the magnitudes, then the sign (the dividend's for a
    remainder, the operands' xor for a quotient). ``rb`` is not -1 here, nor 0."""
    op = Alu.MOD if rem else Alu.DIV
    if not isinstance(rb, Reg):
        rb = signed(rb, 32 if w32 else 64)
    labels = [fs.fresh("sdv") for _ in range(3)]
    avoid = {dst} | ({rb} if isinstance(rb, Reg) else set())
    with borrow(fs, avoid) as tmp:
        fs.emit(mov(tmp, dst, w32=w32))
        if not rem:
            fs.emit(alu(Alu.XOR, tmp, rb, w32=w32))
        fs.emit(stx(8, FP, BPF_TEMP, tmp), jmp(Jmp.JSGE, dst, 0, labels[0], w32=w32), neg(dst, w32=w32))
        fs.code.label(labels[0])
        if not isinstance(rb, Reg) and fits_signed(abs(rb), 32):
            fs.emit(alu(op, dst, abs(rb), w32=w32))
        else:
            fs.emit(mov(tmp, rb, w32=w32), jmp(Jmp.JSGE, tmp, 0, labels[1], w32=w32), neg(tmp, w32=w32))
            fs.code.label(labels[1])
            fs.emit(alu(op, dst, tmp, w32=w32))
        fs.emit(ldx(8, tmp, FP, BPF_TEMP), jmp(Jmp.JSGE, tmp, 0, labels[2], w32=w32), neg(dst, w32=w32))
        fs.code.label(labels[2])


def _signed(fs: FunctionState, rem: bool, dst: Reg, rb: Reg | int, w32: bool) -> None:
    if fs.opt.cpu >= 4:
        fs.emit((smod if rem else sdiv)(dst, rb, w32=w32))
    else:
        _signed_v3(fs, rem, dst, rb, w32)


def _lowerings() -> dict[int, Lowering]:
    """The table, built once: each entry calls the lowering above with its opcode's parameters."""

    def binop_of(op: Alu, w32: bool) -> Lowering:
        return lambda fs, ins: binop(fs, op, w32)

    def compare_of(op: Jmp, w32: bool) -> Lowering:
        return lambda fs, ins: compare(fs, op, w32)

    def divide_of(kind: str, w32: bool) -> Lowering:
        return lambda fs, ins: divide(fs, kind, w32)

    def rotate_of(left: bool, w32: bool) -> Lowering:
        return lambda fs, ins: rotate(fs, left, w32)

    def retype_of(t: ValType) -> Lowering:
        return lambda fs, ins: retype(fs, t)

    def sign_extend_of(bits: int, t: ValType) -> Lowering:
        return lambda fs, ins: sign_extend(fs, bits, t)

    table: dict[int, Lowering] = {op: const for op in (Op.I32_CONST, Op.I64_CONST, Op.F32_CONST, Op.F64_CONST)}
    table.update({op: binop_of(*args) for op, args in _ALU.items()})
    table.update({op: compare_of(*args) for op, args in _CMP.items()})
    table.update({op: divide_of(*args) for op, args in _DIV.items()})
    table.update({op: rotate_of(*args) for op, args in _ROTATE.items()})
    table.update({op: retype_of(t) for op, t in _RETYPE.items()})
    table.update({op: sign_extend_of(*args) for op, args in _SIGN_EXTEND.items()})
    table.update({op: lambda fs, ins: bitcount(fs, ins.op) for op in _BITCOUNT})
    table[Op.I32_EQZ] = lambda fs, ins: test_zero(fs, I32)
    table[Op.I64_EQZ] = lambda fs, ins: test_zero(fs, I64)
    table[Op.I32_WRAP_I64] = lambda fs, ins: wrap(fs)
    return table


LOWERINGS: dict[int, Lowering] = _lowerings()
