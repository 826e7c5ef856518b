"""The ``fusion`` pass: load, operation and store of one place fused into an atomic, where nothing reads the
result and the place is neither the packet nor a spilled pointer."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R7,
    R10,
    alu,
    exit_,
    ld_map_value,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu

from .fixtures import SYS, packet_prog, prog, run_pass


def test_fusion_turns_load_add_store_into_atomic_add() -> None:
    ps = prog(ld_map_value(R1, ".bss", 8), ldx(8, R2, R1, 0), alu(Alu.ADD, R2, R3), stx(8, R1, 0, R2),
              mov(R0, 0), exit_())
    out, n = run_pass("fusion", ps)
    assert n == 1 and out[1] == "lock *(u64 *)(r1 + 0x0) += r3"
    imm = prog(ld_map_value(R1, ".bss", 8), ldx(4, R2, R1, 4), alu(Alu.OR, R2, 16, w32=True), stx(4, R1, 4, R2),
               mov(R0, 0), exit_())
    out, _ = run_pass("fusion", imm)
    assert out[1:3] == ["w2 = 0x10", "lock *(u32 *)(r1 + 0x4) |= w2"]


def test_fusion_refuses_used_results_packets_and_misalignment() -> None:
    used = prog(ld_map_value(R1, ".bss", 0), ldx(8, R2, R1, 0), alu(Alu.ADD, R2, 1), stx(8, R1, 0, R2),
                mov(R0, R2), exit_())
    assert run_pass("fusion", used)[1] == 0
    pkt = packet_prog(ldx(4, R2, R7, 0), alu(Alu.ADD, R2, 1), stx(4, R7, 0, R2))
    assert run_pass("fusion", pkt)[1] == 0
    odd = prog(ld_map_value(R1, ".bss", 2), ldx(4, R2, R1, 0), alu(Alu.ADD, R2, 1), stx(4, R1, 0, R2),
               mov(R0, 0), exit_())
    assert run_pass("fusion", odd)[1] == 0
    sub = prog(ld_map_value(R1, ".bss", 0), ldx(8, R2, R1, 0), alu(Alu.SUB, R2, 1), stx(8, R1, 0, R2),
               mov(R0, 0), exit_())
    assert run_pass("fusion", sub)[1] == 0


def test_fusion_leaves_spilled_pointers_alone() -> None:
    # fp-8 holds a spilled map value pointer: "+= 4" on it must stay a plain load/add/store, or the verifier
    # forgets the pointer
    body = (ld_map_value(R1, ".bss", 0), stx(8, R10, -8, R1), ldx(8, R1, R10, -8), alu(Alu.ADD, R1, 4),
            stx(8, R10, -8, R1), ldx(8, R2, R10, -8), ldx(4, R0, R2, 0), exit_())
    assert run_pass("fusion", prog(*body))[1] == 0
    # the same on a slot holding a number is fused
    num = (st(8, R10, -8, 0), ldx(8, R1, R10, -8), alu(Alu.ADD, R1, 4), stx(8, R10, -8, R1), ldx(8, R0, R10, -8),
           exit_())
    out, n = run_pass("fusion", prog(*num, ptype=SYS))
    assert n == 1 and "lock *(u64 *)(r10 - 0x8) += r1" in out
