"""The ``peephole`` pass: instructions that do nothing removed, tests folded into jset and jmp32, mirrored
comparisons, jumps threaded through gotos."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    alu,
    exit_,
    ja,
    jmp,
    ldx,
    mov,
    neg,
)
from capsule.bpf.opcodes import Alu, Jmp

from .fixtures import SYS, prog, run_pass


def test_peephole_removes_what_does_nothing() -> None:
    ps = prog(mov(R1, R1), ldx(1, R2, R1, 0), alu(Alu.AND, R2, 0xFF), alu(Alu.ADD, R2, 0), ja(0),
              jmp(Jmp.JEQ, R2, 0, 0), neg(R2), neg(R2), mov(R0, R2), mov(R2, R0), alu(Alu.AND, R0, 0x7F), exit_())
    out, _ = run_pass("peephole", ps)
    assert out == ["r2 = *(u8 *)(r1 + 0x0)", "r0 = r2", "r0 &= 0x7f", "exit"]


def test_peephole_keeps_zero_extension_and_block_boundaries() -> None:
    ps = prog(mov(R1, R2), alu(Alu.ADD, R1, 0, w32=True), mov(R0, R1), exit_())
    assert run_pass("peephole", ps)[1] == 0
    ps = prog(neg(R1), jmp(Jmp.JEQ, R2, 0, "n"), mov(R0, 0), neg(R1), mov(R0, R1), exit_(), labels={"n": 3})
    assert run_pass("peephole", ps)[1] == 0


def test_and_then_jne_zero_becomes_jset() -> None:
    ps = prog(ldx(4, R1, R1, 0), alu(Alu.AND, R1, 4), jmp(Jmp.JNE, R1, 0, "t"), mov(R0, 0), exit_(),
              mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if r1 & 0x4 goto +0x2"
    # the masked value is still needed after the jump: left alone
    used = prog(ldx(4, R1, R1, 0), alu(Alu.AND, R1, 4), jmp(Jmp.JNE, R1, 0, "t"), mov(R0, 0), exit_(),
                mov(R0, R1), exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", used)[1] == 0
    # == 0 has no single-instruction form
    eq = prog(ldx(4, R1, R1, 0), alu(Alu.AND, R1, 4), jmp(Jmp.JEQ, R1, 0, "t"), mov(R0, 0), exit_(),
              mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", eq)[1] == 0


def test_copy_and_mask_then_jne_zero_tests_the_source() -> None:
    ps = prog(ldx(4, R3, R1, 0), mov(R2, R3), alu(Alu.AND, R2, 2, w32=True), jmp(Jmp.JNE, R2, 0, "t"),
              mov(R0, R3), exit_(), mov(R0, 1), exit_(), labels={"t": 6}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if w3 & 0x2 goto +0x2"  # the 32-bit mask makes the test 32-bit


def test_zero_extension_compared_in_64_bits_becomes_jmp32() -> None:
    ps = prog(ldx(8, R2, R1, 0), mov(R1, R2, w32=True), jmp(Jmp.JSGT, R1, 0x80, "t"), mov(R0, R2), exit_(),
              mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if w2 > 0x80 goto +0x2"  # signed becomes unsigned on [0, 2**31)
    negative = prog(ldx(8, R2, R1, 0), mov(R1, R2, w32=True), jmp(Jmp.JGT, R1, -1, "t"), mov(R0, R2), exit_(),
                    mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", negative)[1] == 0  # the 64-bit -1 is no 32-bit constant


def test_constant_on_the_left_is_mirrored() -> None:
    ps = prog(ldx(4, R1, R1, 0), mov(R2, 2), jmp(Jmp.JSGT, R2, R1, "t"), mov(R0, 0), exit_(), mov(R0, 1),
              exit_(), labels={"t": 5}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if r1 s< 0x2 goto +0x2"
    live = prog(ldx(4, R1, R1, 0), mov(R2, 2), jmp(Jmp.JSGT, R2, R1, "t"), mov(R0, R2), exit_(), mov(R0, 1),
                exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", live)[1] == 0


def test_jumps_to_a_goto_go_straight_to_its_target_and_the_orphan_goes() -> None:
    from capsule.bpf.asm import ja

    # 0: if r1 == 0 goto 4 (a goto back to 3); the goto is reached by nothing else: it goes too
    ps = prog(ldx(4, R1, R1, 0), jmp(Jmp.JEQ, R1, 0, "g"), mov(R0, 1), exit_(), mov(R0, 0), exit_(), ja("back"),
              labels={"g": 6, "back": 4}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n >= 1 and out == ["r1 = *(u32 *)(r1 + 0x0)", "if r1 == 0x0 goto +0x2", "r0 = 0x1", "exit", "r0 = 0x0",
                              "exit"]
    # a goto also reached by falling into it stays (the verifier refuses unreachable code, not this)
    kept = prog(ldx(4, R1, R1, 0), jmp(Jmp.JEQ, R1, 0, "g"), mov(R0, 1), ja("out"), mov(R0, 0), exit_(),
                labels={"g": 3, "out": 5}, ptype=SYS)
    out, _ = run_pass("peephole", kept)
    assert out[1] == "if r1 == 0x0 goto +0x3" and out[3] == "goto +0x1"
