"""The ``tailmerge`` pass: a duplicated tail ending in exit kept once."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    alu,
    exit_,
    jmp,
    ld_map_value,
    ldx,
    mov,
    stx,
)
from capsule.bpf.disasm import disassemble
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import ProgramSpec
from capsule.opt.passes.tailmerge import TailMerge
from capsule.opt.rewrite import Code

from .fixtures import prog, run_pass


def _tailmerge_with_goto(ps: ProgramSpec) -> tuple[list[str], int]:
    code, n = TailMerge(goto=True).run(Code.from_program(ps), ps.type)
    return disassemble(code.to_program(ps).insns), n


def test_tailmerge_drops_the_copy_nothing_falls_into() -> None:
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R2, 5), mov(R0, 2), exit_(), mov(R0, 2), exit_(), labels={"b": 4})
    out, n = run_pass("tailmerge", ps)
    assert n == 1
    assert out == ["if r1 == 0x0 goto +0x1", "r2 = 0x5", "r0 = 0x2", "exit"]


def test_tailmerge_a_run_entered_by_falling_through_starts_with_a_goto_only_when_asked() -> None:
    tail = (ld_map_value(R1, ".bss", 0), ldx(8, R2, R1, 0), alu(Alu.ADD, R2, 1), stx(8, R1, 0, R2), mov(R0, 2),
            exit_())
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R3, 1), *tail, mov(R3, 2), *tail, labels={"b": 8})
    assert run_pass("tailmerge", ps)[1] == 0  # by default: the goto would raise the verifier's work
    out, n = _tailmerge_with_goto(ps)
    assert n == 1
    # the second copy (entered from `r3 = 2`) is now a goto into the first
    assert out[:8] == ["if r1 == 0x0 goto +0x8", "r3 = 0x1", "ld_pseudo\tr1, 0x2, 0x0", "r2 = *(u64 *)(r1 + 0x0)",
                       "r2 += 0x1", "*(u64 *)(r1 + 0x0) = r2", "r0 = 0x2", "exit"]
    assert out[8:] == ["r3 = 0x2", "goto -0x9"]  # in slots: ld_imm64 is two


def test_tailmerge_follows_jumps_inside_the_runs_and_into_them() -> None:
    # two copies of "if r2 > 9 goto +1; r0 = 1; exit", the second also entered in its middle from the top
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), jmp(Jmp.JEQ, R1, 1, "mid"), mov(R2, 3),
              jmp(Jmp.JGT, R2, 9, "x1"), mov(R0, 1), exit_(),
              mov(R2, 4), jmp(Jmp.JGT, R2, 9, "x2"), mov(R0, 1), exit_(),
              labels={"b": 6, "x1": 5, "mid": 8, "x2": 9})
    assert run_pass("tailmerge", ps)[1] == 0
    out, n = _tailmerge_with_goto(ps)
    assert n == 1
    assert len(out) == 8 and out[-2:] == ["r2 = 0x4", "goto -0x5"]
    assert out[1] == "if r1 == 0x1 goto +0x2"  # was into the removed copy's `r0 = 1`, now into the kept one's


def test_tailmerge_leaves_runs_that_go_different_places() -> None:
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R0, 1), jmp(Jmp.JGT, R0, 9, "e1"), mov(R0, 2), exit_(),
              mov(R0, 1), jmp(Jmp.JGT, R0, 9, "e2"), mov(R0, 3), exit_(), labels={"b": 5, "e1": 4, "e2": 8})
    out, n = _tailmerge_with_goto(ps)
    # the runs differ just before their exits, and a lone exit entered by falling through is not worth a goto
    assert n == 0 and "r0 = 0x2" in out and "r0 = 0x3" in out


def test_tailmerge_does_not_add_a_goto_to_save_nothing() -> None:
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R0, 1), exit_(), mov(R0, 2), exit_(), labels={"b": 3})
    assert _tailmerge_with_goto(ps)[1] == 0  # one instruction entered by falling through: a goto costs as much
