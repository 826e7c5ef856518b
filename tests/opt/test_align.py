"""The ``align`` pass beyond what its text fixtures (``filetests/align/``) show: a nested composition in a
block longer than the windowed scans is merged in one round, and the traces it remembers equal fresh ones."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R3,
    R4,
    R5,
    R7,
    R8,
    R9,
    alu,
    exit_,
    ldx,
    mov,
    stx,
)
from capsule.bpf.opcodes import Alu
from capsule.opt.analysis import Analysis
from capsule.opt.blockvals import BlockValues
from capsule.opt.passes.align import Align
from capsule.opt.passes.base import Edits
from capsule.opt.rewrite import Code

from .fixtures import FILLER, MV, prog, run_pass


def _u64_bytewise(*after) -> tuple:
    """clang's 8-byte load from a packed struct at ``r8 + 0x1c`` (two 4-byte halves, the high one 32-bit),
    into r5, as the Sysdig probe has it."""
    return (mov(R0, 0),
            ldx(1, R3, R8, 0x1c), ldx(1, R5, R8, 0x1d), alu(Alu.LSH, R5, 8), alu(Alu.OR, R5, R3),
            ldx(1, R9, R8, 0x1e), alu(Alu.LSH, R9, 16), ldx(1, R3, R8, 0x1f), alu(Alu.LSH, R3, 24),
            alu(Alu.OR, R3, R9), alu(Alu.OR, R3, R5),
            ldx(1, R4, R8, 0x21), alu(Alu.LSH, R4, 8, w32=True), ldx(1, R5, R8, 0x20), alu(Alu.OR, R4, R5, w32=True),
            ldx(1, R9, R8, 0x22), alu(Alu.LSH, R9, 16, w32=True), ldx(1, R5, R8, 0x23),
            alu(Alu.LSH, R5, 24, w32=True), alu(Alu.OR, R5, R9, w32=True), alu(Alu.OR, R5, R4, w32=True),
            alu(Alu.LSH, R5, 32), alu(Alu.OR, R5, R3),
            *after, stx(8, R7, 0, R5), exit_())


def test_composition_in_a_long_block_merged_in_one_round() -> None:
    # r9's shifted piece is not overwritten for more than WINDOW instructions: still known to have one reader
    ps = prog(*MV, *_u64_bytewise(*FILLER))
    code = Code.from_program(ps)
    e = Edits()
    Align().find(Analysis.of(code, ps.type), e)
    assert e.rewrites == 1
    out, _ = run_pass("align", ps)
    assert out[3] == "r5 = *(u64 *)(r8 + 0x1c)" and len(out) == 2 + 1 + 1 + len(FILLER) + 2


def test_remembered_traces_equal_fresh_ones_at_every_depth() -> None:
    ps = prog(*MV, *_u64_bytewise())
    a = Analysis.of(Code.from_program(ps), ps.type)
    ors = [i for i, ins in enumerate(a.code.insns) if (ins.code & 0xF0) == Alu.OR]
    p = Align()
    p._ids = BlockValues(a)
    for depth in (0, 18, 22, 24, 25):
        for i in ors:
            for reg in (a.code.insns[i].dst, a.code.insns[i].src):
                p._traced = {}
                fresh = p._trace(a, reg, i, False, depth)
                for warm in (0, depth):  # remembered from a shallower call, and from one as deep
                    p._traced = {}
                    for j in ors:
                        p._trace(a, a.code.insns[j].dst, j, False, warm)
                    assert p._trace(a, reg, i, False, depth) == fresh
    p._traced = {}
    assert p._trace(a, R5, ors[-1], False, 0) is not None and p._trace(a, R5, ors[-1], False, 25) is None
