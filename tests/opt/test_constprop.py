"""The ``constprop`` pass beyond its text fixtures (``filetests/constprop/``): a constant already held is not
loaded again, and a dead chain is found faint by the analysis and removed in one round."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R10,
    alu,
    exit_,
    ldx,
    mov,
    stx,
)
from capsule.bpf.opcodes import Alu
from capsule.opt.analysis import Analysis
from capsule.opt.pipeline import make_passes
from capsule.opt.rewrite import Code

from .fixtures import SYS, prog, run_pass


def test_mov_of_the_constant_already_held_goes() -> None:
    ps = prog(mov(R1, 5), stx(8, R10, -8, R1), mov(R1, 5), stx(8, R10, -16, R1), ldx(8, R0, R10, -8),
              ldx(8, R2, R10, -16), alu(Alu.ADD, R0, R2), exit_(), ptype=SYS)
    code, _ = make_passes(["constprop"])[0].run(Code.from_program(ps), ps.type)
    assert sum(1 for i in code.insns if i.code == 0xB7 and i.imm == 5) <= 1


def test_dead_chains_go_in_one_round() -> None:
    ps = prog(ldx(4, R2, R1, 0), mov(R3, R2), alu(Alu.ADD, R3, 1), alu(Alu.LSH, R3, 2), mov(R0, 0), exit_(),
              ptype=SYS)
    a = Analysis(Code.from_program(ps), ps.type)
    assert a.faint == {0, 1, 2, 3}
    out, _ = run_pass("constprop", ps)
    assert out == ["r0 = 0x0", "exit"]


