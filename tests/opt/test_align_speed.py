"""What makes ``align`` cheap must not change what it finds: a composition merged whole in one round (outermost
``|=`` first, def-use looked up over the whole block), block values named lazily, traces remembered per round."""

from __future__ import annotations

from capsule.bpf.asm import R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, Jmp, alu, exit_, jmp, ld_map_value, ldx, mov, stx
from capsule.bpf.opcodes import Alu
from capsule.opt.analysis import Analysis
from capsule.opt.blockvals import NREGS, BlockValues
from capsule.opt.local import WINDOW
from capsule.opt.passes.align import Align
from capsule.opt.passes.base import Edits
from capsule.opt.rewrite import Code

from .fixtures import prog, run_pass

MV = (ld_map_value(R7, ".bss", 0), ld_map_value(R8, ".data", 0))
FILLER = tuple(alu(Alu.ADD, R0, 1) for _ in range(WINDOW + 6))  # longer than the windowed scans look


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


def test_nested_composition_merged_whole_in_one_rewrite() -> None:
    out, n = run_pass("align", prog(*MV, *_u64_bytewise()))
    assert n == 1  # not the 2-byte, then 4-byte, then 8-byte halves one round after the other
    assert out[2:] == ["r0 = 0x0", "r5 = *(u64 *)(r8 + 0x1c)", "*(u64 *)(r7 + 0x0) = r5", "exit"]


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


def _program_with_branches():
    return prog(*MV, mov(R6, R1), mov(R2, R6), ldx(4, R3, R8, 0), jmp(Jmp.JEQ, R3, 0, "b"),
                mov(R4, R3), alu(Alu.LSH, R4, 8), mov(R3, R4), *FILLER, stx(4, R7, 0, R3), mov(R2, R6),
                mov(R9, R4, w32=True),
                ldx(1, R5, R2, 0), alu(Alu.OR, R5, R3), stx(1, R7, 4, R5), mov(R0, 0), exit_(),
                labels={"b": 2 + 4 + 3 + len(FILLER) + 3})


def test_lazy_block_values_equal_a_forward_scan() -> None:
    ps = _program_with_branches()
    a = Analysis.of(Code.from_program(ps), ps.type)
    insns, block_of = a.code.insns, a.block_of
    want: list[list[tuple]] = []
    cur: list[tuple] = []
    for k, e in enumerate(a.effects):
        if not k or block_of[k] != block_of[k - 1]:
            cur = [("in", block_of[k], r) for r in range(NREGS)]
        want.append(list(cur))
        ins = insns[k]
        if ins.code == (0x07 | Alu.MOV | 0x08) and ins.off == 0:
            cur[ins.dst] = cur[ins.src]
        else:
            for r in range(NREGS):
                if e.defs >> r & 1:
                    cur[r] = ("def", k, r)
    # asked in an order that starts blocks in their middle
    v = BlockValues(a)
    for at in sorted(range(len(insns)), key=lambda k: (k * 7919) % len(insns)):
        for r in range(NREGS):
            assert v.value_id(at, r) == want[at][r], (at, r)


def test_uses_in_block_is_uses_within_without_the_window() -> None:
    ps = _program_with_branches()
    a = Analysis.of(Code.from_program(ps), ps.type)
    loc, effs, block_of, live_out = a.local, a.effects, a.block_of, a.live.live_out

    def scan(d: int, reg: int, allowed: set[int]) -> bool:
        m = d + 1
        while m < len(effs) and block_of[m] == block_of[d]:
            if effs[m].uses >> reg & 1 and m not in allowed:
                return False
            if effs[m].defs >> reg & 1:
                return True
            m += 1
        return not live_out[m - 1] >> reg & 1

    far = 0
    for d in range(len(effs)):
        for reg in range(NREGS):
            readers = [m for m in range(d + 1, len(effs)) if effs[m].uses >> reg & 1][:2]
            for allowed in (set(), set(readers[:1]), set(readers)):
                got = loc.uses_in_block(d, reg, allowed)
                assert got == scan(d, reg, allowed), (d, reg, allowed)
                if got and not loc.uses_within(d, reg, allowed):
                    far += 1  # the windowed question gives up here
    assert far  # the fixture does reach past the window
