"""The ``compact`` pass: shorter encodings of the same computation (shift pairs, wide immediates,
sign-extending loads)."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    alu,
    exit_,
    ld_imm64,
    ld_map_value,
    ldx,
    mov,
    movsx,
)
from capsule.bpf.opcodes import Alu
from capsule.kernel.consts import ProgType

from .fixtures import prog, run_pass


def test_compact_shift_pairs_and_ld_imm64() -> None:
    ps = prog(mov(R1, R2), alu(Alu.LSH, R1, 32), alu(Alu.RSH, R1, 32), alu(Alu.LSH, R3, 32),
              alu(Alu.ARSH, R3, 32), ld_imm64(R4, -5), ld_imm64(R0, 0xFFFFFFFF), exit_())
    out, _ = run_pass("compact", ps)
    assert out == ["w1 = w2", "r3 = (s32)r3", "r4 = -0x5", "w0 = -0x1", "exit"]
    big = prog(ld_imm64(R0, 1 << 32), exit_())
    assert run_pass("compact", big)[1] == 0


def test_load_then_sign_extension_becomes_ldsx_on_map_values_only() -> None:
    ps = prog(ld_map_value(R1, ".bss", 0), ldx(4, R2, R1, 4), movsx(R2, R2, 32), mov(R0, R2), exit_())
    out, n = run_pass("compact", ps)
    assert n == 1 and out[1] == "r2 = *(s32 *)(r1 + 0x4)"
    shifts = prog(ld_map_value(R1, ".bss", 0), ldx(2, R2, R1, 4), alu(Alu.LSH, R2, 48), alu(Alu.ARSH, R2, 48),
                  mov(R0, R2), exit_())
    out, _ = run_pass("compact", shifts)
    assert out[1:3] == ["r2 = *(s16 *)(r1 + 0x4)", "r0 = r2"]
    ctx = prog(ldx(4, R2, R1, 4), movsx(R2, R2, 32), mov(R0, R2), exit_(), ptype=ProgType.SCHED_CLS)
    out, _ = run_pass("compact", ctx)
    assert out[0] == "r2 = *(u32 *)(r1 + 0x4)"  # the context's fields are rewritten by the kernel
    wrong_width = prog(ld_map_value(R1, ".bss", 0), ldx(4, R2, R1, 4), movsx(R2, R2, 16), mov(R0, R2), exit_())
    assert run_pass("compact", wrong_width)[0][1] == "r2 = *(u32 *)(r1 + 0x4)"
