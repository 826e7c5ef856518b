"""Instruction selection for wasm's numeric instructions: integer arithmetic with wasm's traps, comparisons
(fused with a following ``br_if``/``if``), bit counting, rotations, conversions between integer widths, and
constants. Memory instructions are in ``memory``; control flow in ``function``.

Operands come from the stack entries (``values``): a constant becomes an immediate where BPF has a form for it.
Registers T0/T1 are scratch; when both are taken (operands deep in the stack live in memory), ``borrow``
saves a stack register to the BPF stack for the duration.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING

from capsule.bpf.asm import alu, ja, jmp, ld_imm64, ldx, mov, movsx, neg, sdiv, smod, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import Instr, Op, ValType

from . import abi
from .values import FP as R10
from .values import STACK_REGS, T0, T1, Const, Entry, Reg, Slot, fits_imm32

if TYPE_CHECKING:
    from .function import FunctionCompiler

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


def imm_of(e: Entry, w32: bool) -> int | None:
    """The immediate form of a constant operand, if BPF has one for this width."""
    if not isinstance(e, Const):
        return None
    if w32:
        return e.bits & 0xFFFF_FFFF
    v = e.bits & 0xFFFF_FFFF_FFFF_FFFF
    v = v - (1 << 64) if v >> 63 else v
    return v if fits_imm32(v) else None


@contextmanager
def borrow(fc: FunctionCompiler, avoid: set[int]):  # type: ignore[no-untyped-def]
    """A scratch register not in ``avoid``: T0/T1 if free, else a stack register saved to the BPF stack."""
    for r in (T1, T0):
        if r not in avoid:
            yield r
            return
    r = next(x for x in STACK_REGS if x not in avoid)
    fc.emit(stx(8, R10, abi.BPF_BORROW, r))
    yield r
    fc.emit(ldx(8, r, R10, abi.BPF_BORROW))


def lower(fc: FunctionCompiler, i: int, ins: Instr) -> int | None:
    """Lower ``ins`` (index ``i``); returns the index of the next instruction, or None if not handled here."""
    from . import memory

    op = ins.op
    if op == Op.I32_CONST:
        fc.push(Const(I32, ins.imm & 0xFFFF_FFFF))  # type: ignore[operator]
    elif op == Op.I64_CONST:
        fc.push(Const(I64, ins.imm & 0xFFFF_FFFF_FFFF_FFFF))  # type: ignore[operator]
    elif op == Op.F32_CONST:
        fc.push(Const(F32, ins.imm))  # type: ignore[arg-type]
    elif op == Op.F64_CONST:
        fc.push(Const(F64, ins.imm))  # type: ignore[arg-type]
    elif op in _ALU:
        binop(fc, *_ALU[op])
    elif op in _CMP:
        return compare(fc, i, *_CMP[op])
    elif op in (Op.I32_EQZ, Op.I64_EQZ):
        fc.push(Const(I32 if op == Op.I32_EQZ else I64, 0))
        return compare(fc, i, Jmp.JEQ, op == Op.I32_EQZ)
    elif op in _DIV:
        divide(fc, *_DIV[op])
    elif op in (Op.I32_ROTL, Op.I32_ROTR, Op.I64_ROTL, Op.I64_ROTR):
        rotate(fc, left=op in (Op.I32_ROTL, Op.I64_ROTL), w32=op in (Op.I32_ROTL, Op.I32_ROTR))
    elif op in (Op.I32_CLZ, Op.I32_CTZ, Op.I32_POPCNT, Op.I64_CLZ, Op.I64_CTZ, Op.I64_POPCNT):
        bitcount(fc, op)
    elif op in _RETYPE:
        slot, e = fc.pop()
        fc.push(Const(_RETYPE[op], e.bits) if isinstance(e, Const) else Slot(_RETYPE[op]))
    elif op == Op.I32_WRAP_I64:
        unary(fc, I32, lambda d: fc.emit(mov(d, d, w32=True)))
    elif op == Op.I64_EXTEND_I32_S:
        unary(fc, I64, lambda d: fc.emit(movsx(d, d, 32)))
    elif op in (Op.I32_EXTEND8_S, Op.I32_EXTEND16_S):
        bits = 8 if op == Op.I32_EXTEND8_S else 16
        unary(fc, I32, lambda d: fc.emit(movsx(d, d, bits, w32=True)))
    elif op in (Op.I64_EXTEND8_S, Op.I64_EXTEND16_S, Op.I64_EXTEND32_S):
        bits = {Op.I64_EXTEND8_S: 8, Op.I64_EXTEND16_S: 16, Op.I64_EXTEND32_S: 32}[op]
        unary(fc, I64, lambda d: fc.emit(movsx(d, d, bits)))
    elif op == Op.REF_NULL:
        fc.push(Const(I32, 0))
    elif op == Op.REF_FUNC:
        fc.push(Const(I32, ins.imm + 1))  # type: ignore[operator]
    elif op == Op.REF_IS_NULL:
        fc.push(Const(I32, 0))
        return compare(fc, i, Jmp.JEQ, True)
    else:
        from . import floats

        nxt = floats.lower(fc, i, ins)
        return nxt if nxt is not None else memory.lower(fc, i, ins)
    return i + 1


def unary(fc: FunctionCompiler, t: ValType, body: Callable[[Reg], None]) -> None:
    slot, e = fc.pop()
    fc.push(e)  # keep the slot occupied while computing into its home
    dst = fc.dst(slot)
    fc.read_into(dst, slot, e)
    body(dst)
    fc.finish(slot, dst, t)


def binop(fc: FunctionCompiler, op: Alu, w32: bool) -> None:
    bs, b = fc.pop()
    a_slot = len(fc.stack) - 1
    a = fc.stack[a_slot]
    t = I32 if w32 else I64
    dst = fc.dst(a_slot)
    imm = imm_of(b, w32)
    if op in _SHIFTS and isinstance(b, Const):
        imm = b.bits & (31 if w32 else 63)
    fc.read_into(dst, a_slot, a)
    if imm is not None:
        fc.emit(alu(op, dst, imm, w32=w32))
    else:
        fc.emit(alu(op, dst, fc.read(bs, b, T1), w32=w32))
    fc.finish(a_slot, dst, t)


def compare(fc: FunctionCompiler, i: int, op: Jmp, w32: bool) -> int:
    """A comparison: fused into a following ``br_if``/``if`` as a conditional jump, else 0/1 in a register."""
    bs, b = fc.pop()
    a_slot, a = fc.pop()
    body = fc.func.body
    nxt = body[i + 1] if i + 1 < len(body) else None

    def test(jop: Jmp, target: str) -> None:
        ra = fc.read(a_slot, a, T0)
        imm = imm_of(b, w32)
        fc.emit(jmp(jop, ra, imm if imm is not None else fc.read(bs, b, T1), target, w32=w32))

    if nxt is not None and nxt.op == Op.BR_IF and not fc.dead:
        fc.pos = i + 1
        c = fc.ctls[-1 - nxt.imm]  # type: ignore[operator]
        fc.branch_if(c, lambda target: test(op, target), lambda target: test(_INVERSE[op], target))
        return i + 2
    if nxt is not None and nxt.op == Op.IF:
        fc.pos = i + 1
        fc.open_if(nxt, lambda target: test(_INVERSE[op], target))
        return i + 2
    fc.push(a)  # the result goes into a's slot
    dst = fc.dst(a_slot)
    ra = fc.read(a_slot, a, T0)
    imm = imm_of(b, w32)
    rb = imm if imm is not None else fc.read(bs, b, T1)
    fc.emit(jmp(op, ra, rb, 2, w32=w32), mov(dst, 0, w32=True), ja(1), mov(dst, 1, w32=True))
    fc.finish(a_slot, dst, I32)
    return i + 1


def divide(fc: FunctionCompiler, kind: str, w32: bool) -> None:
    """Integer division and remainder with wasm's traps (BPF itself defines x/0 and INT_MIN/-1)."""
    bs, b = fc.pop()
    a_slot = len(fc.stack) - 1
    a = fc.stack[a_slot]
    t = I32 if w32 else I64
    dst = fc.dst(a_slot)
    fc.read_into(dst, a_slot, a)
    imm = imm_of(b, w32)
    width = 32 if w32 else 64
    sval = None
    if imm is not None:
        sval = imm - (1 << 32) if w32 and imm >> 31 else imm
    if imm is not None and sval not in (0, -1):
        rb: Reg | int = imm
    else:
        rb = fc.read(bs, b, T1)
        fc.emit(jmp(Jmp.JEQ, rb, 0, fc.trap_label(abi.Trap.INT_DIV_ZERO), w32=w32))
    signed = kind.endswith("_s")
    alu_op = Alu.DIV if kind.startswith("div") else Alu.MOD
    if not signed:
        fc.emit(alu(alu_op, dst, rb, w32=w32))
    elif not isinstance(rb, Reg):  # a constant divisor other than 0 and -1 (Reg is an int subclass)
        fc.emit((sdiv if alu_op == Alu.DIV else smod)(dst, rb, w32=w32))
    else:
        ok = fc.code.fresh(f"f{fc.index}.div")
        done = fc.code.fresh(f"f{fc.index}.divd")
        fc.emit(jmp(Jmp.JNE, rb, -1, ok, w32=w32))
        if alu_op == Alu.MOD:  # x rem -1 = 0
            fc.emit(mov(dst, 0), ja(done))
        elif w32:
            fc.emit(jmp(Jmp.JEQ, dst, 0x8000_0000, fc.trap_label(abi.Trap.INT_OVERFLOW), w32=True))
        else:
            with borrow(fc, {dst, rb}) as tmp:  # INT64_MIN is the only x != 0 with x << 1 == 0
                fc.emit(mov(tmp, dst), alu(Alu.LSH, tmp, 1), jmp(Jmp.JNE, tmp, 0, ok),
                        jmp(Jmp.JNE, dst, 0, fc.trap_label(abi.Trap.INT_OVERFLOW)))
        fc.code.label(ok)
        fc.emit((sdiv if alu_op == Alu.DIV else smod)(dst, rb, w32=w32))
        fc.code.label(done)
    del width
    fc.finish(a_slot, dst, t)


def rotate(fc: FunctionCompiler, left: bool, w32: bool) -> None:
    bs, b = fc.pop()
    a_slot = len(fc.stack) - 1
    a = fc.stack[a_slot]
    t = I32 if w32 else I64
    bits = 32 if w32 else 64
    dst = fc.dst(a_slot)
    fc.read_into(dst, a_slot, a)
    first, second = (Alu.LSH, Alu.RSH) if left else (Alu.RSH, Alu.LSH)
    if isinstance(b, Const):
        n = b.bits & (bits - 1)
        if n:
            with borrow(fc, {dst}) as tmp:
                fc.emit(mov(tmp, dst), alu(first, tmp, n, w32=w32), alu(second, dst, bits - n, w32=w32),
                        alu(Alu.OR, dst, tmp, w32=w32))
    else:
        rb = fc.read(bs, b, T1)
        with borrow(fc, {dst, rb}) as tmp:
            # x << n | x >> (-n & (bits-1)): BPF masks shift counts to the operand width
            fc.emit(mov(tmp, dst), alu(first, tmp, rb, w32=w32), neg(rb, w32=w32),
                    alu(second, dst, rb, w32=w32), alu(Alu.OR, dst, tmp, w32=w32))
    fc.finish(a_slot, dst, t)


def bitcount(fc: FunctionCompiler, op: int) -> None:
    """clz/ctz/popcnt: BPF has no such instructions; all three reduce to a SWAR popcount."""
    w32 = op in (Op.I32_CLZ, Op.I32_CTZ, Op.I32_POPCNT)
    slot, e = fc.pop()
    fc.push(e)
    t = I32 if w32 else I64
    dst = fc.dst(slot)
    fc.read_into(dst, slot, e)
    with borrow(fc, {dst}) as t1, borrow(fc, {dst, t1}) as t2:
        if op in (Op.I32_CLZ, Op.I64_CLZ):  # smear the highest set bit down, count the zeros above it
            for s in (1, 2, 4, 8, 16) + (() if w32 else (32,)):
                fc.emit(mov(t1, dst), alu(Alu.RSH, t1, s, w32=w32), alu(Alu.OR, dst, t1, w32=w32))
            fc.emit(alu(Alu.XOR, dst, -1, w32=w32))
        elif op in (Op.I32_CTZ, Op.I64_CTZ):  # (x & -x) - 1 has exactly ctz(x) ones
            fc.emit(mov(t1, dst), neg(t1, w32=w32), alu(Alu.AND, dst, t1, w32=w32),
                    alu(Alu.SUB, dst, 1, w32=w32))
        popcount(fc, dst, t1, t2, w32)
    fc.finish(slot, dst, t)


def popcount(fc: FunctionCompiler, x: Reg, t1: Reg, t2: Reg, w32: bool) -> None:
    def mask(v: int) -> Reg | int:
        if w32:
            return v & 0xFFFF_FFFF
        fc.emit(ld_imm64(t2, v))
        return t2

    m1, m2, m4, h01 = 0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x0101010101010101
    fc.emit(mov(t1, x), alu(Alu.RSH, t1, 1, w32=w32))
    fc.emit(alu(Alu.AND, t1, mask(m1), w32=w32), alu(Alu.SUB, x, t1, w32=w32))
    m = mask(m2)
    fc.emit(mov(t1, x), alu(Alu.AND, t1, m, w32=w32), alu(Alu.RSH, x, 2, w32=w32),
            alu(Alu.AND, x, m, w32=w32), alu(Alu.ADD, x, t1, w32=w32))
    fc.emit(mov(t1, x), alu(Alu.RSH, t1, 4, w32=w32), alu(Alu.ADD, x, t1, w32=w32))
    fc.emit(alu(Alu.AND, x, mask(m4), w32=w32))
    fc.emit(alu(Alu.MUL, x, mask(h01), w32=w32), alu(Alu.RSH, x, 24 if w32 else 56, w32=w32))
