"""The BPF instruction: one value type, its 8-byte encoding, and decoding.

An ``Insn`` is a decoded instruction. ``ld_imm64`` (the only 16-byte instruction) is one ``Insn`` whose ``imm``
holds the whole 64-bit immediate (low word | high word << 32, unsigned), so a list of ``Insn`` is a program and
``slots()`` tells how many 8-byte slots it occupies.

Instructions may carry symbolic metadata the way cilium/ebpf's asm package does:
``ref`` names what the instruction refers to (a label for a jump, a function for a call, a map or data symbol
for ``ld_imm64``, a kfunc), and ``sym`` names a label defined at this instruction. Encoding ignores both; the
assembler (``capsule.bpf.asm``) and the loader resolve them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from capsule.ints import MASK16, MASK32, MASK64

from .opcodes import CLASS_MASK, LD_IMM64, OP_MASK, Class, Jmp

SLOT = 8
_FMT = struct.Struct("<BBhi")
# Encoding packs the fields as unsigned bit patterns: the same bytes as the signed layout, without a sign
# conversion per field (the writer encodes every instruction of a program).
_UFMT = struct.Struct("<BBHI")
_CALL = Class.JMP | Jmp.CALL


class DecodeError(ValueError):
    """Raised for bytes that are not a well-formed BPF instruction stream."""


@dataclass(eq=True, slots=True)
class Insn:
    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0
    ref: str | None = None
    sym: str | None = None

    # -- shape ---------------------------------------------------------------------------------------------
    @property
    def cls(self) -> int:
        return self.code & CLASS_MASK

    @property
    def is_ld_imm64(self) -> bool:
        return self.code == LD_IMM64

    def slots(self) -> int:
        return 2 if self.code == LD_IMM64 else 1

    @property
    def is_jump(self) -> bool:
        """A jump with a PC-relative target (not call or exit)."""
        if self.cls not in (Class.JMP, Class.JMP32):
            return False
        op = self.code & OP_MASK
        if op in (Jmp.CALL, Jmp.EXIT):
            return False
        return True

    @property
    def is_call(self) -> bool:
        return self.code == _CALL

    @property
    def is_exit(self) -> bool:
        return self.code == (Class.JMP | Jmp.EXIT)

    @property
    def is_gotol(self) -> bool:
        return self.code == (Class.JMP32 | Jmp.JA)

    def jump_offset(self) -> int:
        """The PC-relative target offset in slots (gotol keeps it in imm)."""
        return self.imm if self.is_gotol else self.off

    def with_jump_offset(self, off: int) -> Insn:
        return replace(self, imm=off) if self.is_gotol else replace(self, off=off)

    def __reduce__(self) -> tuple[type[Insn], tuple[int, int, int, int, int, str | None, str | None]]:
        # a plain tuple of fields: lowered functions travel between processes and into the build cache pickled
        return Insn, (self.code, self.dst, self.src, self.off, self.imm, self.ref, self.sym)

    # -- encoding ------------------------------------------------------------------------------------------
    def encode(self) -> bytes:
        regs = (self.src & 0xF) << 4 | (self.dst & 0xF)
        if self.code == LD_IMM64:
            v = self.imm & MASK64
            return _UFMT.pack(self.code, regs, self.off & MASK16, v & MASK32) + _UFMT.pack(0, 0, 0, v >> 32)
        return _UFMT.pack(self.code, regs, self.off & MASK16, self.imm & MASK32)

    def __repr__(self) -> str:  # compact, for test failures
        extra = "".join(f" {k}={v!r}" for k, v in (("ref", self.ref), ("sym", self.sym)) if v)
        return f"Insn(0x{self.code:02x} dst={self.dst} src={self.src} off={self.off} imm={self.imm}{extra})"


def encode(insns: list[Insn]) -> bytes:
    return b"".join(i.encode() for i in insns)


def decode(data: bytes) -> list[Insn]:
    """Decode a byte string of instructions. ld_imm64 consumes two slots."""
    if len(data) % SLOT:
        raise DecodeError(f"instruction bytes not a multiple of 8 ({len(data)} bytes)")
    out: list[Insn] = []
    n = len(data) // SLOT
    i = 0
    while i < n:
        code, regs, off, imm = _FMT.unpack_from(data, i * SLOT)
        dst, src = regs & 0xF, regs >> 4
        if code == LD_IMM64:
            if i + 1 >= n:
                raise DecodeError(f"ld_imm64 at slot {i} is missing its second half")
            code2, regs2, off2, imm2 = _FMT.unpack_from(data, (i + 1) * SLOT)
            if code2 or regs2 or off2:
                raise DecodeError(f"ld_imm64 at slot {i}: malformed second half")
            out.append(Insn(code, dst, src, off, (imm & MASK32) | (imm2 & MASK32) << 32))
            i += 2
        else:
            out.append(Insn(code, dst, src, off, imm))
            i += 1
    return out


def slot_offsets(insns: list[Insn]) -> list[int]:
    """The slot index at which each instruction starts."""
    offs, pos = [], 0
    for ins in insns:  # plain reads: this runs over every instruction of a program, several times a build
        offs.append(pos)
        pos += 2 if ins.code == LD_IMM64 else 1
    return offs
