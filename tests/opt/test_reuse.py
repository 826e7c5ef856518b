"""The ``reuse`` pass: a map address, stack address or wide constant built again where a register already
holds it on every path."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R6,
    R7,
    R10,
    alu,
    call_helper,
    exit_,
    jmp,
    ld_imm64,
    ld_map_fd,
    ld_map_value,
    mov,
    st,
)
from capsule.bpf.opcodes import Alu, Jmp

from .fixtures import prog, run_pass


def test_reuse_takes_a_map_from_the_register_that_holds_it() -> None:
    ps = prog(ld_map_fd(R6, "m"), st(4, R10, -4, 0), mov(R1, R6), mov(R2, R10), alu(Alu.ADD, R2, -4),
              call_helper(1), ld_map_fd(R1, "m"), mov(R2, R10), alu(Alu.ADD, R2, -4), call_helper(1),
              mov(R0, 0), exit_())
    out, n = run_pass("reuse", ps)
    assert n == 1
    assert out[6] == "r1 = r6"


def test_reuse_stack_address_from_a_callee_saved_register() -> None:
    ps = prog(mov(R7, R10), alu(Alu.ADD, R7, -8), st(8, R10, -8, 0), ld_map_fd(R1, "m"), mov(R2, R7),
              call_helper(1), ld_map_fd(R1, "n"), mov(R2, R10), alu(Alu.ADD, R2, -8), call_helper(1),
              mov(R7, R10), alu(Alu.ADD, R7, -8), mov(R0, 0), exit_())
    out, n = run_pass("reuse", ps)
    assert n == 2
    assert out.count("r2 = r7") == 2 and out.count("r7 = r10") == 1 and "r2 = r10" not in out


def test_reuse_needs_the_value_on_every_path() -> None:
    # r6 holds the map on one path only; a different map, a redefinition or a call all end what r6 holds
    ps = prog(jmp(Jmp.JEQ, R1, 0, "j"), ld_map_fd(R6, "m"), ld_map_fd(R1, "m"), mov(R0, 0), exit_(),
              labels={"j": 2})
    assert run_pass("reuse", ps)[1] == 0
    other = prog(ld_map_fd(R6, "m"), ld_map_fd(R1, "n"), mov(R0, 0), exit_())
    assert run_pass("reuse", other)[1] == 0
    moved = prog(ld_map_fd(R6, "m"), alu(Alu.ADD, R6, 0), ld_map_fd(R1, "m"), mov(R0, 0), exit_())
    assert run_pass("reuse", moved)[1] == 0
    clobbered = prog(ld_map_fd(R2, "m"), call_helper(5), ld_map_fd(R1, "m"), mov(R0, 0), exit_())
    assert run_pass("reuse", clobbered)[1] == 0
    offsets = prog(ld_map_value(R6, ".bss", 0), ld_map_value(R1, ".bss", 8), mov(R0, 0), exit_())
    assert run_pass("reuse", offsets)[1] == 0
    const = prog(ld_imm64(R6, 1 << 40), ld_imm64(R1, 1 << 40), mov(R0, 0), exit_())
    assert run_pass("reuse", const)[0][1] == "r1 = r6"
