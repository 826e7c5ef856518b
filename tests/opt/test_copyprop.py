"""The ``copyprop`` pass: readers of a copy read the original, and the copy goes."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R5,
    R6,
    R8,
    R10,
    alu,
    atomic,
    call_helper,
    exit_,
    jmp,
    ld_map_value,
    ldx,
    mov,
    stx,
)
from capsule.bpf.opcodes import Alu, Atomic, Jmp
from capsule.kernel.consts import ProgType

from .fixtures import prog, run_pass


def test_copyprop_readers_read_the_original() -> None:
    ps = prog(ldx(4, R5, R1, 0), mov(R8, R5), stx(4, R10, -4, R8), jmp(Jmp.JEQ, R8, 8, "a"), mov(R0, R5), exit_(),
              mov(R0, 0), exit_(), labels={"a": 6})
    out, n = run_pass("copyprop", ps)
    assert n == 1
    assert out[:4] == ["r5 = *(u32 *)(r1 + 0x0)", "*(u32 *)(r10 - 0x4) = r5", "if r5 == 0x8 goto +0x2", "r0 = r5"]
    # the original may change at the last reader: `r5 += r8` reads the old r5 twice
    ps = prog(ldx(4, R5, R1, 0), mov(R8, R5), alu(Alu.ADD, R5, R8), mov(R0, R5), exit_())
    assert run_pass("copyprop", ps)[0][1:3] == ["r5 += r5", "r0 = r5"]


def test_copyprop_frame_pointer_copies_only_into_memory_accesses() -> None:
    ps = prog(mov(R2, R10), stx(8, R2, -8, R1), ldx(8, R0, R2, -8), exit_(), ptype=ProgType.SYSCALL)
    out, _ = run_pass("copyprop", ps)
    assert out == ["*(u64 *)(r10 - 0x8) = r1", "r0 = *(u64 *)(r10 - 0x8)", "exit"]
    arith = prog(mov(R2, R10), mov(R3, 0), alu(Alu.ADD, R3, R2), mov(R0, 0), exit_())
    assert run_pass("copyprop", arith)[1] == 0


def test_copyprop_leaves_what_cannot_read_the_original() -> None:
    call_arg = prog(ldx(8, R6, R1, 0), mov(R1, R6), call_helper(16), mov(R0, R6), exit_())
    assert run_pass("copyprop", call_arg)[1] == 0
    written = prog(mov(R2, R1), alu(Alu.ADD, R2, 1), mov(R0, R2), exit_())
    assert run_pass("copyprop", written)[1] == 0
    source_changes = prog(mov(R2, R1), mov(R1, 0), mov(R0, R2), exit_())
    assert run_pass("copyprop", source_changes)[1] == 0
    live_out = prog(mov(R2, R1), jmp(Jmp.JEQ, R2, 0, "z"), mov(R0, R2), exit_(), mov(R0, 0), exit_(),
                    labels={"z": 4})
    assert run_pass("copyprop", live_out)[1] == 0
    atomics = prog(ld_map_value(R1, ".bss", 0), mov(R2, R1), mov(R3, 1), atomic(Atomic.ADD, 8, R2, 0, R3),
                   mov(R0, 0), exit_())
    assert run_pass("copyprop", atomics)[1] == 0
