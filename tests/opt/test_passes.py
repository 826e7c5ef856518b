"""Each pass on bytecode fixtures: what it must rewrite, and what it must leave alone."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R7,
    R10,
    alu,
    call_helper,
    exit_,
    ja,
    jmp,
    ld_imm64,
    ld_map_value,
    ldx,
    mov,
    neg,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel.consts import ProgType

from .fixtures import prog, run_pass

PKT = (ldx(4, R7, R1, 0), ldx(4, R3, R1, 4), mov(R2, R7), alu(Alu.ADD, R2, 16), jmp(Jmp.JGT, R2, R3, "out"))
OUT = (mov(R0, 2), exit_())


def _pkt(*body, ptype=ProgType.XDP):
    return prog(*PKT, *body, *OUT, labels={"out": len(PKT) + len(body)}, ptype=ptype)


# -- align --------------------------------------------------------------------------------------------------
def test_align_merges_byte_loads_from_the_packet() -> None:
    ps = _pkt(ldx(1, R1, R7, 13), alu(Alu.LSH, R1, 8, w32=True), ldx(1, R2, R7, 12),
              alu(Alu.OR, R1, R2, w32=True), stx(8, R10, -8, R1))
    out, n = run_pass("align", ps)
    assert n == 1
    assert out[len(PKT):len(PKT) + 2] == ["r1 = *(u16 *)(r7 + 0xc)", "*(u64 *)(r10 - 0x8) = r1"]


def test_align_merges_four_bytes_and_two_halves() -> None:
    ps = _pkt(ldx(1, R1, R7, 3), alu(Alu.LSH, R1, 24), ldx(1, R2, R7, 2), alu(Alu.LSH, R2, 16),
              alu(Alu.OR, R1, R2), ldx(2, R2, R7, 0), alu(Alu.OR, R1, R2), stx(8, R10, -8, R1))
    out, _ = run_pass("align", ps)
    assert "r1 = *(u32 *)(r7 + 0x0)" in out and len(out) == len(PKT) + 2 + 2


def test_align_leaves_wrong_order_reused_parts_and_interleaved_stores() -> None:
    big_endian = _pkt(ldx(1, R1, R7, 12), alu(Alu.LSH, R1, 8), ldx(1, R2, R7, 13), alu(Alu.OR, R1, R2),
                      stx(8, R10, -8, R1))
    assert run_pass("align", big_endian)[1] == 0
    reused = _pkt(ldx(1, R1, R7, 13), alu(Alu.LSH, R1, 8), ldx(1, R2, R7, 12), alu(Alu.OR, R1, R2),
                  stx(8, R10, -8, R2))
    assert run_pass("align", reused)[1] == 0
    clobbered = _pkt(ldx(1, R1, R7, 13), alu(Alu.LSH, R1, 8), st(1, R7, 12, 0), ldx(1, R2, R7, 12),
                     alu(Alu.OR, R1, R2), stx(8, R10, -8, R1))
    assert run_pass("align", clobbered)[1] == 0


def test_align_on_the_stack_needs_alignment() -> None:
    body = (st(8, R10, -8, 0), ldx(1, R1, R10, -7), alu(Alu.LSH, R1, 8), ldx(1, R2, R10, -8),
            alu(Alu.OR, R1, R2), mov(R0, R1), exit_())
    assert run_pass("align", prog(*body, ptype=ProgType.SYSCALL))[1] == 1
    odd = (st(8, R10, -8, 0), ldx(1, R1, R10, -6), alu(Alu.LSH, R1, 8), ldx(1, R2, R10, -7),
           alu(Alu.OR, R1, R2), mov(R0, R1), exit_())
    assert run_pass("align", prog(*odd, ptype=ProgType.SYSCALL))[1] == 0


def test_align_merges_byte_stores_of_a_shifted_value() -> None:
    ps = _pkt(ldx(4, R4, R7, 0), mov(R2, R4), alu(Alu.RSH, R2, 8), stx(1, R7, 5, R2), stx(1, R7, 4, R4))
    out, n = run_pass("align", ps)
    assert n == 1
    assert out[len(PKT):len(PKT) + 2] == ["r4 = *(u32 *)(r7 + 0x0)", "*(u16 *)(r7 + 0x4) = r4"]


# -- constprop ----------------------------------------------------------------------------------------------
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


# -- superword ----------------------------------------------------------------------------------------------
def test_superword_merges_zero_byte_stores() -> None:
    ps = prog(st(1, R10, -4, 0), st(1, R10, -3, 0), st(1, R10, -2, 0), st(1, R10, -1, 0), mov(R0, 0), exit_())
    out, _ = run_pass("superword", ps)
    assert out == ["*(u32 *)(r10 - 0x4) = 0x0", "r0 = 0x0", "exit"]


def test_superword_values_are_little_endian_and_8_byte_stores_sign_extend() -> None:
    ps = prog(st(2, R10, -8, 0x1234), st(2, R10, -6, 0x5678), mov(R0, 0), exit_())
    assert run_pass("superword", ps)[0][0] == "*(u32 *)(r10 - 0x8) = 0x56781234"
    wide = prog(st(4, R10, -8, 1), st(4, R10, -4, 1), mov(R0, 0), exit_())
    assert run_pass("superword", wide)[1] == 0  # 0x100000001 is no sign-extended imm32
    misaligned = prog(st(1, R10, -3, 0), st(1, R10, -2, 0), mov(R0, 0), exit_())
    assert run_pass("superword", misaligned)[1] == 0


# -- fusion -------------------------------------------------------------------------------------------------
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
    pkt = _pkt(ldx(4, R2, R7, 0), alu(Alu.ADD, R2, 1), stx(4, R7, 0, R2))
    assert run_pass("fusion", pkt)[1] == 0
    odd = prog(ld_map_value(R1, ".bss", 2), ldx(4, R2, R1, 0), alu(Alu.ADD, R2, 1), stx(4, R1, 0, R2),
               mov(R0, 0), exit_())
    assert run_pass("fusion", odd)[1] == 0
    sub = prog(ld_map_value(R1, ".bss", 0), ldx(8, R2, R1, 0), alu(Alu.SUB, R2, 1), stx(8, R1, 0, R2),
               mov(R0, 0), exit_())
    assert run_pass("fusion", sub)[1] == 0


# -- compact ------------------------------------------------------------------------------------------------
def test_compact_shift_pairs_and_ld_imm64() -> None:
    ps = prog(mov(R1, R2), alu(Alu.LSH, R1, 32), alu(Alu.RSH, R1, 32), alu(Alu.LSH, R3, 32),
              alu(Alu.ARSH, R3, 32), ld_imm64(R4, -5), ld_imm64(R0, 0xFFFFFFFF), exit_())
    out, _ = run_pass("compact", ps)
    assert out == ["w1 = w2", "r3 = (s32)r3", "r4 = -0x5", "w0 = -0x1", "exit"]
    big = prog(ld_imm64(R0, 1 << 32), exit_())
    assert run_pass("compact", big)[1] == 0


# -- peephole -----------------------------------------------------------------------------------------------
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
