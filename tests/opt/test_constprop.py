"""The ``constprop`` pass: constants folded into immediates and known branches, dead code and dead stack
stores removed, and what it must keep."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R6,
    R10,
    alu,
    call_helper,
    exit_,
    jmp,
    ld_imm64,
    ld_map_fd,
    ld_map_value,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel.consts import ProgType
from capsule.opt.analysis import Analysis
from capsule.opt.pipeline import make_passes
from capsule.opt.rewrite import Code

from .fixtures import SYS, prog, run_pass


def test_constprop_store_immediate_and_dead_mov() -> None:
    ps = prog(ld_map_value(R2, ".bss", 0), mov(R1, 7), stx(4, R2, 0, R1), mov(R0, 0), exit_())
    out, _ = run_pass("constprop", ps)
    assert out[1:] == ["*(u32 *)(r2 + 0x0) = 0x7", "r0 = 0x0", "exit"]


def test_constprop_no_store_immediate_into_the_context() -> None:
    ps = prog(mov(R2, 7), stx(4, R1, 0, R2), mov(R0, 0), exit_(), ptype=ProgType.SCHED_CLS)
    out, _ = run_pass("constprop", ps)
    assert out[1] == "*(u32 *)(r1 + 0x0) = r2"


def test_constprop_folds_alu_and_known_branches() -> None:
    ps = prog(mov(R1, 5), alu(Alu.ADD, R1, 3), jmp(Jmp.JEQ, R1, 8, "yes"), mov(R0, 1), exit_(),
              mov(R0, R1), exit_(), labels={"yes": 5})
    out, _ = run_pass("constprop", ps)
    assert out == ["r0 = 0x8", "exit"]


def test_constprop_wide_constants_are_not_made_immediates() -> None:
    ps = prog(ld_imm64(R1, 1 << 40), stx(8, R10, -8, R1), ldx(8, R0, R10, -8), exit_(), ptype=ProgType.SYSCALL)
    out, _ = run_pass("constprop", ps)
    assert out[1] == "*(u64 *)(r10 - 0x8) = r1"


def test_constprop_removes_dead_stack_stores_only_when_the_frame_is_private() -> None:
    ps = prog(st(8, R10, -8, 1), st(8, R10, -16, 2), ldx(8, R0, R10, -16), exit_(), ptype=ProgType.SYSCALL)
    out, _ = run_pass("constprop", ps)
    assert out == ["*(u64 *)(r10 - 0x10) = 0x2", "r0 = *(u64 *)(r10 - 0x10)", "exit"]
    escaped = prog(st(8, R10, -8, 1), mov(R1, R10), alu(Alu.ADD, R1, -8), mov(R2, 8), call_helper(16),
                   mov(R0, 0), exit_(), ptype=ProgType.SYSCALL)
    assert run_pass("constprop", escaped)[0][0] == "*(u64 *)(r10 - 0x8) = 0x1"


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


def test_dead_stack_store_found_even_when_the_frame_escapes() -> None:
    # the frame escapes (r2 = fp-8 goes to a helper), but fp-24 is written twice and read once
    ps = prog(ldx(8, R3, R1, 0), st(8, R10, -8, 0), st(8, R10, -24, 1), stx(8, R10, -24, R3), ldx(8, R6, R10, -24),
              ld_map_fd(R1, "m"), mov(R2, R10), alu(Alu.ADD, R2, -8), call_helper(1), mov(R0, R6), exit_(),
              ptype=SYS)
    out, _ = run_pass("constprop", ps)
    assert "*(u64 *)(r10 - 0x18) = 0x1" not in out
    assert "*(u64 *)(r10 - 0x18) = r3" in out and "*(u64 *)(r10 - 0x8) = 0x0" in out
    # a helper reads upwards from its pointer argument: fp-24 is above fp-32, so both stores stay live
    above = prog(st(8, R10, -24, 1), mov(R2, R10), alu(Alu.ADD, R2, -32), ld_map_fd(R1, "m"), call_helper(1),
                 mov(R0, 0), exit_(), ptype=SYS)
    assert run_pass("constprop", above)[0][0] == "*(u64 *)(r10 - 0x18) = 0x1"
