"""What one instruction reads and writes: registers, memory, control flow.

Every analysis asks the same questions of an instruction, so the answers live here once. Registers are bit
masks (bit ``n`` is ``rn``). Helper calls read ``r1``-``r5`` (as many as the helper takes, when known) and
clobber ``r0``-``r5``; BPF-to-BPF and kfunc calls do the same; legacy ``ld_abs``/``ld_ind`` read ``r6`` (the
skb) and clobber ``r0``-``r5`` as the verifier says they do.
"""

from __future__ import annotations

from typing import NamedTuple, cast

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import (
    ADDR_SPACE_CAST,
    CALL,
    EXIT,
    LD_IMM64,
    MEM_SIZE,
    MODE_MASK,
    NUM_REGS,
    OP_MASK,
    SIZE_MASK,
    Alu,
    Atomic,
    CallKind,
    Class,
    Jmp,
    Mode,
    Src,
)

from .helpers import HELPER_ARGS

__all__ = ["Effect", "effect", "effects", "reg_mask", "CALLER_SAVED", "ARGS", "HELPER_ARGS", "mem_size",
           "is_pure_alu", "JUMPS", "COND_JUMPS", "EXIT", "CALL", "LD_IMM64", "regs_of"]


def reg_mask(*regs: int) -> int:
    m = 0
    for r in regs:
        m |= 1 << r
    return m


ARGS = reg_mask(1, 2, 3, 4, 5)
CALLER_SAVED = reg_mask(0, 1, 2, 3, 4, 5)



class Effect(NamedTuple):
    uses: int  # registers read
    defs: int  # registers written (or clobbered)
    load: bool = False  # reads memory
    store: bool = False  # writes memory
    call: bool = False  # helper, kfunc or BPF-to-BPF call


# opcode tables, so that hot loops test an ``int`` against a set instead of calling ``Insn`` properties
JUMPS = frozenset(c | op | s for c in (Class.JMP, Class.JMP32) for op in Jmp if op not in (Jmp.CALL, Jmp.EXIT)
                  for s in (0, Src.X))  # PC-relative jumps, conditional or not
COND_JUMPS = frozenset(c for c in JUMPS if c & OP_MASK not in (Jmp.JA, Jmp.JCOND))

_CACHE: dict[tuple[int, int, int, int], Effect] = {}


def effects(insns: list[Insn]) -> list[Effect]:
    """``effect`` of every instruction, memoised by encoding (programs repeat the same few hundred)."""
    get = _CACHE.get
    out = [get((ins.code, ins.dst, ins.src, ins.imm)) for ins in insns]
    if None in out:  # encodings not seen yet
        for i, e in enumerate(out):
            if e is None:
                ins = insns[i]
                out[i] = _CACHE[(ins.code, ins.dst, ins.src, ins.imm)] = effect(ins)
    if len(_CACHE) > 200_000:
        _CACHE.clear()
    return cast(list[Effect], out)  # every None was filled above


def regs_of(mask: int) -> tuple[int, ...]:
    """The register numbers set in ``mask``."""
    return _REGS_OF[mask] if mask < len(_REGS_OF) else tuple(r for r in range(16) if mask >> r & 1)


_REGS_OF = [tuple(r for r in range(NUM_REGS) if m >> r & 1) for m in range(1 << NUM_REGS)]


def mem_size(ins: Insn) -> int:
    return MEM_SIZE[ins.code & SIZE_MASK]


def is_pure_alu(ins: Insn) -> bool:
    """ALU/ALU64 or a plain ld_imm64: no memory, no control flow, one register written."""
    return ins.cls in (Class.ALU, Class.ALU64) or ins.is_ld_imm64


def effect(ins: Insn) -> Effect:
    cls = ins.cls
    if cls in (Class.ALU, Class.ALU64):
        op = ins.code & OP_MASK
        d = 1 << ins.dst
        if op == Alu.MOV:
            if ins.code & Src.X:
                return Effect(1 << ins.src, d)
            return Effect(0, d)
        if op in (Alu.NEG, Alu.END):
            return Effect(d, d)
        if ins.code & Src.X:
            return Effect(d | 1 << ins.src, d)
        return Effect(d, d)
    if ins.is_ld_imm64:
        return Effect(0, 1 << ins.dst)
    if cls == Class.LD:  # ld_abs / ld_ind
        mode = ins.code & MODE_MASK
        uses = reg_mask(6) | (1 << ins.src if mode == Mode.IND else 0)
        return Effect(uses, CALLER_SAVED, load=True, call=True)
    if cls == Class.LDX:
        return Effect(1 << ins.src, 1 << ins.dst, load=True)
    if cls == Class.ST:
        return Effect(1 << ins.dst, 0, store=True)
    if cls == Class.STX:
        mode = ins.code & MODE_MASK
        if mode == Mode.ATOMIC:
            uses = 1 << ins.dst | 1 << ins.src
            defs = 0
            if ins.imm == Atomic.CMPXCHG:
                uses |= 1
                defs = 1
            elif ins.imm & Atomic.FETCH:
                defs = 1 << ins.src
            return Effect(uses, defs, load=True, store=True)
        return Effect(1 << ins.dst | 1 << ins.src, 0, store=True)
    # JMP / JMP32
    op = ins.code & OP_MASK
    if ins.is_call:
        if ins.src == CallKind.HELPER:
            n = HELPER_ARGS.get(ins.imm, 5)
            uses = reg_mask(*range(1, n + 1))
        else:
            uses = ARGS
        return Effect(uses, CALLER_SAVED, load=True, store=True, call=True)
    if ins.is_exit:
        return Effect(1, 0)
    if op in (Jmp.JA, Jmp.JCOND):
        return Effect(0, 0)
    uses = 1 << ins.dst
    if ins.code & Src.X:
        uses |= 1 << ins.src
    return Effect(uses, 0)


def is_addr_space_cast(ins: Insn) -> bool:
    return ins.code == (Class.ALU64 | Alu.MOV | Src.X) and ins.off == ADDR_SPACE_CAST
