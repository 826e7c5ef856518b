"""Block values (``capsule.opt.blockvals``): names of values, not registers, computed lazily."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R6,
    R7,
    R8,
    call_helper,
    exit_,
    mov,
)
from capsule.bpf.opcodes import Alu
from capsule.opt.analysis import Analysis
from capsule.opt.blockvals import NREGS, BlockValues
from capsule.opt.rewrite import Code

from .fixtures import branchy_prog, prog


def test_block_values_name_values_not_registers() -> None:
    from capsule.opt.analysis import Analysis
    from capsule.opt.blockvals import BlockValues
    from capsule.opt.rewrite import Code

    ps = prog(mov(R6, R1), mov(R7, R6), mov(R8, R6, w32=True), call_helper(5), mov(R0, 0), exit_())
    a = Analysis.of(Code.from_program(ps), ps.type)
    v = BlockValues(a)
    assert v.value_id(2, 7) == v.value_id(2, 6) == v.value_id(0, 1)  # 64-bit copies: the same value
    assert v.value_id(3, 8) != v.value_id(3, 6)  # a 32-bit copy truncates
    assert v.value_id(0, 1) != v.value_id(0, 2)  # each register's own value on entry
    assert len({v.value_id(4, r) for r in range(6)}) == 6  # a call's clobbered registers are all different


def test_lazy_block_values_equal_a_forward_scan() -> None:
    ps = branchy_prog()
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
