"""Instruction constructors and a label-resolving ``Builder`` for code generators.

Every BPF instruction through cpu v4 has a constructor here, named after what it does, so a code generator
reads like the program it emits::

    b = Builder()
    b.emit(mov(R0, 0))
    b.emit(jmp(Jmp.JEQ, R1, 0, "out"))
    b.emit(alu(Alu.ADD, R0, R1))
    b.label("out")
    b.emit(exit_())
    insns = b.assemble()

Operands: a register is a ``Reg`` (the constants ``R0`` .. ``R10``); any other ``int`` is an immediate. That
one rule lets ``mov(R1, R2)`` and ``mov(R1, 2)`` pick the X or K form without a second function. Sizes are
given in bytes (1, 2, 4, 8), as C programmers think of them.

Symbolic references follow ``capsule.bpf.spec``: a jump, a BPF-to-BPF call or ``ld_func`` names a label in
``ref`` and the ``Builder`` turns it into a relative offset (clearing ``ref``); ``ld_map_fd``/``ld_map_value``
and ``call_kfunc`` keep their ``ref`` for the loader.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace

from capsule.ints import signed, unsigned

from .insn import Insn
from .opcodes import (
    ADDR_SPACE_CAST,
    BYTES_SIZE,
    LD_IMM64,
    NUM_REGS,
    Alu,
    Atomic,
    CallKind,
    Class,
    Jmp,
    Mode,
    Pseudo,
    Size,
    Src,
)

__all__ = [
    "AsmError",
    "Builder",
    "Reg",
    "R0", "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9",
    "R10",
    "FP",
    "alu",
    "mov",
    "neg",
    "sdiv",
    "smod",
    "movsx",
    "bswap",
    "to_le",
    "to_be",
    "ld_imm64",
    "ld_map_fd",
    "ld_map_value",
    "ld_func",
    "ld_btf_id",
    "ld_abs",
    "ld_ind",
    "ldx",
    "ldxs",
    "st",
    "stx",
    "atomic",
    "xchg",
    "cmpxchg",
    "addr_space_cast",
    "jmp",
    "ja",
    "gotol",
    "may_goto",
    "call_helper",
    "call",
    "call_kfunc",
    "exit_",
    "resolve",
]

_S16 = range(-(1 << 15), 1 << 15)
_S32 = range(-(1 << 31), 1 << 31)
_U32 = range(0, 1 << 32)


class AsmError(ValueError):
    """An instruction that cannot be built or a program whose labels cannot be resolved (``index``: the
    instruction, when resolving)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class Reg(int):
    """A register number; distinguishes ``mov(R1, R2)`` (register) from ``mov(R1, 2)`` (immediate)."""

    def __new__(cls, n: int) -> Reg:
        if not 0 <= n <= 10:
            raise AsmError(f"no register r{n}")
        return super().__new__(cls, n)

    def __repr__(self) -> str:
        return f"r{int(self)}"


R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 = (Reg(i) for i in range(NUM_REGS))
FP = R10  # the read-only frame pointer

Operand = Reg | int
Target = str | int  # a label name, or an already-known slot offset


# -- operand checks ------------------------------------------------------------------------------------------
def _reg(r: int, what: str = "register") -> int:
    if not isinstance(r, Reg):
        raise AsmError(f"{what} must be a Reg (R0..R10), got {r!r}")
    return int(r)


def _imm32(v: int) -> int:
    """An immediate that fits the 32-bit field; unsigned spellings (0xffffffff) are accepted and wrapped."""
    v = int(v)  # an IntEnum would make `in range` walk the range
    if v in _S32:
        return v
    if v in _U32:
        return signed(v, 32)
    raise AsmError(f"immediate {v:#x} does not fit in 32 bits")


def _off16(v: int, wide: bool = False) -> int:
    """A memory offset, checked to fit the 16-bit field unless ``wide`` (the caller widens it later)."""
    v = int(v)
    if v not in _S16 and not wide:
        raise AsmError(f"offset {v} does not fit in 16 bits")
    return v


def _size(nbytes: int) -> Size:
    try:
        return BYTES_SIZE[nbytes]
    except KeyError:
        raise AsmError(f"access size must be 1, 2, 4 or 8 bytes, got {nbytes}") from None


# -- ALU -----------------------------------------------------------------------------------------------------
def alu(op: Alu, dst: Reg, src_or_imm: Operand, *, w32: bool = False, off: int = 0) -> Insn:
    """``dst op= src``: ALU64 (or ALU with ``w32``), register or immediate source.

    ``off`` selects the signed variants (1 for sdiv/smod) and movsx widths; prefer the named constructors.
    """
    cls = Class.ALU if w32 else Class.ALU64
    if op in (Alu.NEG, Alu.END):
        raise AsmError(f"use neg()/bswap()/to_le()/to_be() for {op.name}")
    if isinstance(src_or_imm, Reg):
        return Insn(cls | op | Src.X, _reg(dst), int(src_or_imm), off)
    return Insn(cls | op | Src.K, _reg(dst), 0, off, _imm32(src_or_imm))


def mov(dst: Reg, src_or_imm: Operand, *, w32: bool = False) -> Insn:
    """``dst = src`` (a 32-bit mov zero-extends into the upper half)."""
    return alu(Alu.MOV, dst, src_or_imm, w32=w32)


def neg(dst: Reg, *, w32: bool = False) -> Insn:
    return Insn((Class.ALU if w32 else Class.ALU64) | Alu.NEG | Src.K, _reg(dst))


def sdiv(dst: Reg, src_or_imm: Operand, *, w32: bool = False) -> Insn:
    """Signed division (cpu v4): DIV with ``off = 1``."""
    return alu(Alu.DIV, dst, src_or_imm, w32=w32, off=1)


def smod(dst: Reg, src_or_imm: Operand, *, w32: bool = False) -> Insn:
    """Signed remainder (cpu v4): MOD with ``off = 1``."""
    return alu(Alu.MOD, dst, src_or_imm, w32=w32, off=1)


def movsx(dst: Reg, src: Reg, bits: int, *, w32: bool = False) -> Insn:
    """``dst = (s<bits>)src`` (cpu v4): sign-extend the low ``bits`` of ``src``; MOV X with ``off = bits``."""
    allowed = (8, 16) if w32 else (8, 16, 32)
    if bits not in allowed:
        raise AsmError(f"movsx{'32' if w32 else '64'} cannot sign-extend from {bits} bits")
    return alu(Alu.MOV, dst, _as_reg(src), w32=w32, off=bits)


def _as_reg(r: Reg) -> Reg:
    _reg(r)
    return r


def _end_bits(bits: int) -> int:
    if bits not in (16, 32, 64):
        raise AsmError(f"byte swap width must be 16, 32 or 64, got {bits}")
    return bits


def bswap(dst: Reg, bits: int) -> Insn:
    """Unconditional byte swap of the low ``bits`` (cpu v4): ALU64 | END | K."""
    return Insn(Class.ALU64 | Alu.END | Src.K, _reg(dst), imm=_end_bits(bits))


def to_le(dst: Reg, bits: int) -> Insn:
    """Convert to little endian (a truncation to ``bits`` on a little-endian machine): ALU | END | K."""
    return Insn(Class.ALU | Alu.END | Src.K, _reg(dst), imm=_end_bits(bits))


def to_be(dst: Reg, bits: int) -> Insn:
    """Convert to big endian (a byte swap on a little-endian machine): ALU | END | X."""
    return Insn(Class.ALU | Alu.END | Src.X, _reg(dst), imm=_end_bits(bits))


def addr_space_cast(dst: Reg, src: Reg, dst_as: int, src_as: int) -> Insn:
    """Arena pointer conversion (ALU64 MOV X, ``off = 1``, ``imm = dst_as << 16 | src_as``).

    ``addr_space_cast(R1, R0, 0, 1)`` turns an arena (address space 1) pointer into a kernel one.
    """
    if not (0 <= dst_as < 1 << 16 and 0 <= src_as < 1 << 16):
        raise AsmError("address space numbers must fit in 16 bits")
    return Insn(Class.ALU64 | Alu.MOV | Src.X, _reg(dst), _reg(src), ADDR_SPACE_CAST, dst_as << 16 | src_as)


# -- 64-bit immediates ---------------------------------------------------------------------------------------
def ld_imm64(dst: Reg, value: int) -> Insn:
    """``dst = value`` for any 64-bit value (two slots). Negative values are stored two's-complement."""
    if not -(1 << 63) <= value < 1 << 64:
        raise AsmError(f"ld_imm64 value {value:#x} does not fit in 64 bits")
    return Insn(LD_IMM64, _reg(dst), Pseudo.NONE, 0, unsigned(value))


def ld_map_fd(dst: Reg, map_name: str) -> Insn:
    """``dst = &map`` (the map pointer); the loader puts the map's fd in ``imm``."""
    return Insn(LD_IMM64, _reg(dst), Pseudo.MAP_FD, 0, 0, ref=map_name)


def ld_map_value(dst: Reg, map_name: str, offset: int = 0) -> Insn:
    """``dst = &map.value[0] + offset`` (global data); the high word holds ``offset``, the loader the fd."""
    if offset not in _U32:
        raise AsmError(f"map value offset {offset} out of range")
    return Insn(LD_IMM64, _reg(dst), Pseudo.MAP_VALUE, 0, offset << 32, ref=map_name)


def ld_func(dst: Reg, label: str) -> Insn:
    """``dst = &subprogram`` (callback for bpf_loop etc.); the ``Builder`` resolves the relative offset."""
    return Insn(LD_IMM64, _reg(dst), Pseudo.FUNC, 0, 0, ref=label)


def ld_btf_id(dst: Reg, btf_id: int = 0, *, ref: str | None = None) -> Insn:
    """``dst = &kernel_variable`` by vmlinux BTF id (a ksym); ``ref`` may name it for a later resolver."""
    if btf_id not in _U32:
        raise AsmError(f"BTF id {btf_id} out of range")
    return Insn(LD_IMM64, _reg(dst), Pseudo.BTF_ID, 0, btf_id, ref=ref)


# -- legacy packet access (socket filters) -------------------------------------------------------------------
def ld_abs(size: int, imm: int) -> Insn:
    """``r0 = ntoh(*(size *)(skb->data + imm))`` (classic BPF packet load, implicit r6 = skb)."""
    if size == 8:
        raise AsmError("ld_abs has no 8-byte form")
    return Insn(Class.LD | _size(size) | Mode.ABS, imm=_imm32(imm))


def ld_ind(size: int, src: Reg, imm: int) -> Insn:
    """``r0 = ntoh(*(size *)(skb->data + src + imm))``."""
    if size == 8:
        raise AsmError("ld_ind has no 8-byte form")
    return Insn(Class.LD | _size(size) | Mode.IND, 0, _reg(src), 0, _imm32(imm))


# -- memory --------------------------------------------------------------------------------------------------
def ldx(size: int, dst: Reg, src: Reg, off: int, *, wide: bool = False) -> Insn:
    """``dst = *(u<size> *)(src + off)``, zero-extended. With ``wide`` the offset may exceed 16 bits, for a
    caller that rewrites such accesses before encoding (the compiler's frames, ``Code.widen_offsets``)."""
    return Insn(Class.LDX | _size(size) | Mode.MEM, _reg(dst), _reg(src), _off16(off, wide))


def ldxs(size: int, dst: Reg, src: Reg, off: int) -> Insn:
    """``dst = *(s<size> *)(src + off)``, sign-extended (cpu v4, MEMSX; 1, 2 or 4 bytes)."""
    if size == 8:
        raise AsmError("sign-extending load has no 8-byte form (use ldx)")
    return Insn(Class.LDX | _size(size) | Mode.MEMSX, _reg(dst), _reg(src), _off16(off))


def st(size: int, dst: Reg, off: int, imm: int, *, wide: bool = False) -> Insn:
    """``*(u<size> *)(dst + off) = imm`` (``wide``: as for ``ldx``)."""
    return Insn(Class.ST | _size(size) | Mode.MEM, _reg(dst), 0, _off16(off, wide), _imm32(imm))


def stx(size: int, dst: Reg, off: int, src: Reg, *, wide: bool = False) -> Insn:
    """``*(u<size> *)(dst + off) = src`` (``wide``: as for ``ldx``)."""
    return Insn(Class.STX | _size(size) | Mode.MEM, _reg(dst), _reg(src), _off16(off, wide))


_ATOMIC_OPS = (Atomic.ADD, Atomic.OR, Atomic.AND, Atomic.XOR)


def atomic(op: Atomic, size: int, dst: Reg, off: int, src: Reg, *, fetch: bool = False) -> Insn:
    """``lock *(size *)(dst + off) op= src``; with ``fetch`` the old value is returned in ``src``.

    ``op`` is one of ADD/OR/AND/XOR; use ``xchg``/``cmpxchg`` for the exchanging forms. Sizes 4 and 8.
    """
    if op not in _ATOMIC_OPS:
        raise AsmError(f"atomic() takes ADD/OR/AND/XOR, not {op!r}; use xchg()/cmpxchg()")
    return _atomic(op | (Atomic.FETCH if fetch else 0), size, dst, off, src)


def xchg(size: int, dst: Reg, off: int, src: Reg) -> Insn:
    """``src = xchg(dst + off, src)``."""
    return _atomic(Atomic.XCHG, size, dst, off, src)


def cmpxchg(size: int, dst: Reg, off: int, src: Reg) -> Insn:
    """``r0 = cmpxchg(dst + off, r0, src)``: stores ``src`` if the memory equals r0; r0 gets the old value."""
    return _atomic(Atomic.CMPXCHG, size, dst, off, src)


def _atomic(imm: int, size: int, dst: Reg, off: int, src: Reg) -> Insn:
    if size not in (4, 8):
        raise AsmError(f"atomic operations are 4 or 8 bytes, not {size}")
    return Insn(Class.STX | _size(size) | Mode.ATOMIC, _reg(dst), _reg(src), _off16(off), imm)


# -- control flow --------------------------------------------------------------------------------------------
def _target(label_or_offset: Target) -> tuple[int, str | None]:
    if isinstance(label_or_offset, str):
        return 0, label_or_offset
    return label_or_offset, None


def jmp(op: Jmp, dst: Reg, src_or_imm: Operand, label_or_offset: Target, *, w32: bool = False) -> Insn:
    """``if dst op src goto target`` (JMP, or JMP32 comparing the low 32 bits with ``w32``)."""
    if op in (Jmp.JA, Jmp.CALL, Jmp.EXIT, Jmp.JCOND):
        raise AsmError(f"jmp() is for conditional jumps; use ja/gotol/call/exit_/may_goto for {op.name}")
    off, ref = _target(label_or_offset)
    cls = Class.JMP32 if w32 else Class.JMP
    if isinstance(src_or_imm, Reg):
        return Insn(cls | op | Src.X, _reg(dst), int(src_or_imm), _off16(off), ref=ref)
    return Insn(cls | op | Src.K, _reg(dst), 0, _off16(off), _imm32(src_or_imm), ref=ref)


def ja(label_or_offset: Target) -> Insn:
    """``goto target`` within +-32K slots (the ``Builder`` widens it to ``gotol`` when needed)."""
    off, ref = _target(label_or_offset)
    return Insn(Class.JMP | Jmp.JA, off=_off16(off), ref=ref)


def gotol(label_or_offset: Target) -> Insn:
    """``gotol target`` (cpu v4): unconditional jump with a 32-bit offset in ``imm``."""
    off, ref = _target(label_or_offset)
    return Insn(Class.JMP32 | Jmp.JA, imm=_imm32(off), ref=ref)


def may_goto(label_or_offset: Target) -> Insn:
    """``may_goto target``: falls through until the kernel's loop budget runs out, then jumps."""
    off, ref = _target(label_or_offset)
    return Insn(Class.JMP | Jmp.JCOND, off=_off16(off), ref=ref)


def call_helper(helper_id: int) -> Insn:
    """``call helper_id`` (BPF_FUNC_*)."""
    return Insn(Class.JMP | Jmp.CALL, src=CallKind.HELPER, imm=_imm32(helper_id))


def call(label_or_offset: Target) -> Insn:
    """BPF-to-BPF call of the subprogram at a label (``imm`` becomes its slot offset minus one)."""
    off, ref = _target(label_or_offset)
    return Insn(Class.JMP | Jmp.CALL, src=CallKind.BPF, imm=_imm32(off), ref=ref)


def call_kfunc(name: str, btf_id: int = 0) -> Insn:
    """Call of a kernel function; the loader replaces ``imm`` with its vmlinux BTF id."""
    return Insn(Class.JMP | Jmp.CALL, src=CallKind.KFUNC, imm=_imm32(btf_id), ref=name)


def exit_() -> Insn:
    return Insn(Class.JMP | Jmp.EXIT)


# -- label resolution ----------------------------------------------------------------------------------------
# plain ints for the loops over every instruction (an enum member's lookup costs five times a global's)
_JMP, _JMP32, _ALU, _ALU64 = int(Class.JMP), int(Class.JMP32), int(Class.ALU), int(Class.ALU64)
_OP_CALL, _OP_EXIT, _OP_JCOND = int(Jmp.CALL), int(Jmp.EXIT), int(Jmp.JCOND)
_CALL = _JMP | _OP_CALL
_SRC_X = int(Src.X)
_PSEUDO_FUNC, _CALL_BPF = int(Pseudo.FUNC), int(CallKind.BPF)


def _is_label_ref(ins: Insn) -> bool:
    """Whether ``ins.ref`` names a label of this program (rather than a map or kfunc for the loader)."""
    if ins.ref is None:
        return False
    code = ins.code
    if code == LD_IMM64:
        return ins.src == _PSEUDO_FUNC
    if code == _CALL:
        return ins.src == _CALL_BPF
    cls = code & 0x07
    return (cls == _JMP or cls == _JMP32) and code & 0xF0 not in (_OP_CALL, _OP_EXIT)


# The verifier rewrites some instructions into several before the JIT sees them (may_goto's counter, the
# division-by-zero guards of div/mod by a register, inlined helpers), and a jump whose offset no longer fits
# 16 bits after that is refused ("insn N cannot be patched due to 16-bit range"): a jump counts this many
# extra slots for each such instruction it spans.
PATCH_SLOTS = 8
_INVERSE = {
    Jmp.JEQ: Jmp.JNE, Jmp.JNE: Jmp.JEQ, Jmp.JGT: Jmp.JLE, Jmp.JLE: Jmp.JGT, Jmp.JGE: Jmp.JLT, Jmp.JLT: Jmp.JGE,
    Jmp.JSGT: Jmp.JSLE, Jmp.JSLE: Jmp.JSGT, Jmp.JSGE: Jmp.JSLT, Jmp.JSLT: Jmp.JSGE,
}


_DIVMOD = (int(Alu.DIV), int(Alu.MOD))  # by a register: the kernel adds a zero check (may_goto, helper calls: below)


def _is_conditional(ins: Insn) -> bool:
    return ins.is_jump and not ins.is_gotol and ins.code & 0xF0 != Jmp.JA


def resolve(insns: list[Insn], labels: dict[str, int] | None = None, *, relax: bool = True) -> list[Insn]:
    return resolve_mapped(insns, labels, relax=relax)[0]


def resolve_mapped(insns: list[Insn], labels: dict[str, int] | None = None, *,
                   relax: bool = True) -> tuple[list[Insn], list[int]]:
    """Turn label references into slot-relative offsets.

    Labels come from ``labels`` (name -> instruction index) and from each instruction's ``sym``. Offsets
    count slots, so an ``ld_imm64`` between a jump and its target counts twice. With ``relax``, a jump whose
    offset does not fit 16 bits (with PATCH_SLOTS of margin for every instruction the kernel expands on the way)
    becomes a ``gotol``: an unconditional ``ja`` in place, a conditional one as the inverted condition jumping
    over a ``gotol`` (``jset`` and ``may_goto``, which have no inverse, as the jump, a ``ja`` over the ``gotol``,
    and the ``gotol``). Without ``relax`` such a jump, and with it one beyond 32 bits, is an ``AsmError``, as is
    a reference to an undefined label. Returns new instructions; jump/call refs are cleared, map/kfunc refs kept.
    """
    table: dict[str, int] = dict(labels or {})
    for idx, ins in enumerate(insns):
        if ins.sym is not None:
            prev = table.setdefault(ins.sym, idx)
            if prev != idx:
                raise AsmError(f"label {ins.sym!r} defined twice (instructions {prev} and {idx})")
    patched = [0]  # instructions the kernel expands before each instruction (and the end)
    base = [0]  # slot offset of every instruction (and one past the end) before any jump grows
    refs: list[tuple[int, int]] = []  # (instruction, target) of every label reference
    npatched = nslots = 0
    n = len(insns)
    for idx, ins in enumerate(insns):  # the hot loop of a large build: plain reads, no properties
        code = ins.code
        cls = code & 0x07
        if cls == _JMP or cls == _JMP32:
            op = code & 0xF0
            if op == _OP_JCOND or (op == _OP_CALL and ins.src == 0):
                npatched += 1
        elif (cls == _ALU or cls == _ALU64) and code & 0x08 == _SRC_X and code & 0xF0 in _DIVMOD:
            npatched += 1
        patched.append(npatched)
        nslots += 2 if code == LD_IMM64 else 1
        base.append(nslots)
        if ins.ref is not None and _is_label_ref(ins):
            target = table.get(ins.ref)
            if target is None:
                raise AsmError(f"instruction {idx} ({ins!r}) refers to undefined label {ins.ref!r}")
            if not 0 <= target < n:
                raise AsmError(f"label {ins.ref!r} (used by instruction {idx}) is past the last instruction")
            refs.append((idx, target))
    # Grow conditional jumps to their long form until none is out of reach: growing one moves others.
    far: dict[int, int] = {}  # conditional jumps that take the long form -> the slots their form adds
    candidates = [(idx, target) for idx, target in refs if _is_conditional(insns[idx])] if relax else []
    while candidates:
        slots = _Slots(base, far)
        grown = [(idx, target) for idx, target in candidates
                 if abs(slots.at(target) - slots.at(idx) - 1) + PATCH_SLOTS * abs(patched[target] - patched[idx])
                 >= 1 << 15]
        if not grown:
            break
        for idx, _ in grown:
            far[idx] = _long_extra(insns[idx])
        candidates = [c for c in candidates if c[0] not in far]
    slots = _Slots(base, far)
    out: list[Insn] = []
    where: list[int] = []  # index in ``out`` of every input instruction
    done = 0  # instructions before this one are in ``out``; those between references are copied as a slice
    for idx, target in refs:
        where.extend(range(len(out), len(out) + idx - done))
        out.extend(insns[done:idx])
        where.append(len(out))
        done = idx + 1
        ins = insns[idx]
        delta = slots.at(target) - slots.at(idx)
        if idx in far:
            out.extend(_long_form(ins, delta))
            continue
        margin = PATCH_SLOTS * abs(patched[target] - patched[idx])
        out.append(_with_offset(ins, idx, delta - 1, relax, margin))
    where.extend(range(len(out), len(out) + len(insns) - done))
    out.extend(insns[done:])
    return out, where


class _Slots:
    """Slot offsets once the jumps in ``far`` take their long form: the base offset plus what the long forms
    before an instruction add (few jumps grow, so a bisect over them beats recounting every instruction)."""

    def __init__(self, base: list[int], far: dict[int, int]) -> None:
        self._base = base
        self._far = sorted(far)
        self._extra = [0]
        for idx in self._far:
            self._extra.append(self._extra[-1] + far[idx])

    def at(self, idx: int) -> int:
        return self._base[idx] + self._extra[bisect_left(self._far, idx)]


def _long_extra(ins: Insn) -> int:
    """Instructions a conditional jump's long form adds."""
    return 1 if (ins.code & 0xF0) in _INVERSE else 2


def _long_form(ins: Insn, from_start: int) -> list[Insn]:
    """A conditional jump to ``from_start`` slots after its own position, as instructions that reach that far."""
    op = Jmp(ins.code & 0xF0)
    cls = ins.code & 0x0F  # class and source bit
    if op in _INVERSE:  # if !cond skip; gotol target
        inverted = replace(ins, code=cls | _INVERSE[op], off=1, ref=None)
        return [inverted, Insn(Class.JMP32 | Jmp.JA, imm=from_start - 2)]
    # jset / may_goto: if cond goto +1 (the gotol); else ja +1 (over it)
    return [replace(ins, off=1, ref=None), Insn(Class.JMP | Jmp.JA, off=1),
            Insn(Class.JMP32 | Jmp.JA, imm=from_start - 3)]


def _with_offset(ins: Insn, idx: int, delta: int, relax: bool, margin: int = 0) -> Insn:
    # Insn(...) rather than dataclasses.replace: this runs for every jump of a large build
    if ins.is_ld_imm64:  # ld_func: the low word is the signed offset, the high word zero
        return Insn(ins.code, ins.dst, ins.src, ins.off, unsigned(delta, 32), None, ins.sym)
    if ins.is_call or ins.is_gotol:
        if delta not in _S32:
            raise AsmError(f"instruction {idx}: target of {ins.ref!r} is {delta} slots away, beyond 32 bits", idx)
        return Insn(ins.code, ins.dst, ins.src, ins.off, delta, None, ins.sym)
    if abs(delta) + margin < 1 << 15 and delta in _S16:
        return Insn(ins.code, ins.dst, ins.src, delta, ins.imm, None, ins.sym)
    if relax and ins.code == Class.JMP | Jmp.JA and delta in _S32:
        return Insn(Class.JMP32 | Jmp.JA, imm=delta, sym=ins.sym)
    raise AsmError(
        f"instruction {idx}: jump to {ins.ref!r} is {delta} slots away, beyond the 16-bit offset"
        + (f" with {margin} slots of margin for the kernel's rewrites" if margin else ""), idx
    )


class Builder:
    """Collects instructions and labels; ``assemble`` resolves labels, forward and backward.

    A label binds to the next instruction emitted, and the first label at an instruction becomes its ``sym``
    (the ELF writer and disassembler use it as the name of that position). Several labels may share one
    instruction.
    """

    def __init__(self) -> None:
        self._insns: list[Insn] = []
        self._labels: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._insns)

    @property
    def slots(self) -> int:
        """Slots emitted so far (the slot index the next instruction will have)."""
        return sum(i.slots() for i in self._insns)

    def label(self, name: str) -> None:
        if name in self._labels:
            raise AsmError(f"label {name!r} defined twice")
        self._labels[name] = len(self._insns)

    def emit(self, *insns: Insn) -> None:
        for ins in insns:
            if ins.sym is not None:
                self.label(ins.sym)
            self._insns.append(ins)

    def assemble(self, *, relax: bool = True) -> list[Insn]:
        insns = list(self._insns)
        first: dict[int, str] = {}
        for name, idx in self._labels.items():
            first.setdefault(idx, name)
        for idx, name in first.items():
            if idx < len(insns) and insns[idx].sym is None:
                insns[idx] = replace(insns[idx], sym=name)
        return resolve(insns, self._labels, relax=relax)
