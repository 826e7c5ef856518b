"""Exact BPF arithmetic on concrete 64-bit values (what the interpreter and the JITs compute).

Constant propagation folds with these, so they follow the instruction-set document to the letter: division
by zero gives 0, modulo by zero leaves the dividend, shifts use the low 6 (5) bits of the amount, 32-bit
operations zero-extend their result, immediates of 64-bit operations are sign-extended.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import OP_MASK, Alu, Class, Jmp, Src
from capsule.ints import MASK32, MASK64, signed, unsigned

__all__ = ["alu_result", "branch_taken", "imm64"]


def imm64(imm: int) -> int:
    """The 64-bit unsigned value of a 32-bit immediate as a 64-bit operation sees it (sign-extended)."""
    return unsigned(signed(imm, 32))


def _bswap(v: int, bits: int) -> int:
    return int.from_bytes((v & ((1 << bits) - 1)).to_bytes(bits // 8, "little"), "big")


def alu_result(ins: Insn, dst: int, src: int) -> int | None:
    """The value ``ins`` (an ALU/ALU64 instruction) leaves in its destination, given the 64-bit unsigned
    values of ``dst`` and of the source operand (``src`` is ignored for K forms). None when the operation is
    not one this function models (then the caller must not fold)."""
    w32 = ins.cls == Class.ALU
    op = ins.code & OP_MASK
    bits = 32 if w32 else 64
    mask = MASK32 if w32 else MASK64
    if op == Alu.END:
        width = ins.imm
        if width not in (16, 32, 64):
            return None
        if ins.cls == Class.ALU64:  # bswap (cpu v4)
            return _bswap(dst, width)
        if ins.code & Src.X:  # to_be
            return _bswap(dst, width)
        return dst & ((1 << width) - 1)  # to_le: truncation on little endian
    b = (src if ins.code & Src.X else (ins.imm & MASK32 if w32 else imm64(ins.imm))) & mask
    a = dst & mask
    if op == Alu.MOV:
        if ins.code & Src.X and ins.off in (8, 16, 32):
            return signed(b, ins.off) & mask
        if ins.off not in (0,):
            return None  # addr_space_cast and friends
        return b
    if ins.off not in (0, 1) or (ins.off == 1 and op not in (Alu.DIV, Alu.MOD)):
        return None
    sdiv = ins.off == 1  # sdiv / smod
    if op == Alu.ADD:
        r = a + b
    elif op == Alu.SUB:
        r = a - b
    elif op == Alu.MUL:
        r = a * b
    elif op == Alu.DIV:
        if b == 0:
            r = 0
        elif sdiv:
            sa, sb = signed(a, bits), signed(b, bits)
            q = abs(sa) // abs(sb)
            r = q if (sa < 0) == (sb < 0) else -q
        else:
            r = a // b
    elif op == Alu.MOD:
        if b == 0:
            r = a
        elif sdiv:
            sa, sb = signed(a, bits), signed(b, bits)
            m = abs(sa) % abs(sb)
            r = -m if sa < 0 else m
        else:
            r = a % b
    elif op == Alu.OR:
        r = a | b
    elif op == Alu.AND:
        r = a & b
    elif op == Alu.XOR:
        r = a ^ b
    elif op == Alu.LSH:
        r = a << (b & (bits - 1))
    elif op == Alu.RSH:
        r = a >> (b & (bits - 1))
    elif op == Alu.ARSH:
        r = signed(a, bits) >> (b & (bits - 1))
    elif op == Alu.NEG:
        r = -a
    else:
        return None
    return r & mask


def branch_taken(ins: Insn, dst: int, src: int) -> bool | None:
    """Whether a conditional jump is taken for concrete operand values (None for JA/may_goto/others)."""
    op = ins.code & OP_MASK
    w32 = ins.cls == Class.JMP32
    bits = 32 if w32 else 64
    mask = MASK32 if w32 else MASK64
    b = (src if ins.code & Src.X else imm64(ins.imm)) & mask
    a = dst & mask
    sa, sb = signed(a, bits), signed(b, bits)
    table: dict[int, bool] = {
        Jmp.JEQ: a == b,
        Jmp.JNE: a != b,
        Jmp.JGT: a > b,
        Jmp.JGE: a >= b,
        Jmp.JLT: a < b,
        Jmp.JLE: a <= b,
        Jmp.JSET: bool(a & b),
        Jmp.JSGT: sa > sb,
        Jmp.JSGE: sa >= sb,
        Jmp.JSLT: sa < sb,
        Jmp.JSLE: sa <= sb,
    }
    return table.get(op)
