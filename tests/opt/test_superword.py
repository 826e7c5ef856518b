"""The ``superword`` pass: adjacent immediate stores merged into one wider store."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R10,
    exit_,
    mov,
    st,
)
from capsule.opt.pipeline import make_passes
from capsule.opt.rewrite import Code

from .fixtures import SYS, prog, run_pass


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


def test_superword_merges_a_run_of_bytes_into_one_store_in_one_round() -> None:
    ps = prog(*(st(1, R10, -8 + k, 0) for k in range(8)), mov(R0, 0), exit_(), ptype=SYS)
    code, n = make_passes(["superword"])[0].run(Code.from_program(ps), ps.type)
    from capsule.bpf.disasm import disassemble

    assert disassemble(code.insns)[0] == "*(u64 *)(r10 - 0x8) = 0x0" and len(code.insns) == 3


def test_superword_keeps_later_values_and_leaves_partial_overlaps() -> None:
    ps = prog(st(2, R10, -8, 0x1111), st(1, R10, -8, 0x22), st(1, R10, -7, 0x33), mov(R0, 0), exit_(), ptype=SYS)
    out, _ = run_pass("superword", ps)
    assert out[0] == "*(u16 *)(r10 - 0x8) = 0x3322"
    overlap = prog(st(4, R10, -8, 1), st(1, R10, -6, 2), st(1, R10, -4, 3), mov(R0, 0), exit_(), ptype=SYS)
    out, _ = run_pass("superword", overlap)
    assert out[:2] == ["*(u32 *)(r10 - 0x8) = 0x20001", "*(u8 *)(r10 - 0x4) = 0x3"]
    straddle = prog(st(1, R10, -8, 1), st(1, R10, -7, 2), st(1, R10, -6, 3), st(2, R10, -5, 4), mov(R0, 0),
                    exit_(), ptype=SYS)
    out, _ = run_pass("superword", straddle)
    # the 2-byte store crosses the 4-byte window, so only the first two bytes merge
    assert out[:3] == ["*(u16 *)(r10 - 0x8) = 0x201", "*(u8 *)(r10 - 0x6) = 0x3", "*(u16 *)(r10 - 0x5) = 0x4"]


def test_superword_skips_windows_that_would_cut_a_store() -> None:
    # bytes -8..-5 = 01 02 03 04, written by a byte, a half starting mid-window and a byte
    ps = prog(st(1, R10, -8, 1), st(2, R10, -7, 0x0302), st(1, R10, -5, 4), mov(R0, 0), exit_())
    out, n = run_pass("superword", ps)
    assert n == 1 and out[0] == "*(u32 *)(r10 - 0x8) = 0x4030201" and len(out) == 3
    # a later byte store overwrites half of a half store: the two become one half store of the final bytes
    over = prog(st(2, R10, -8, 0xFFFF), st(1, R10, -7, 0x11), mov(R0, 0), exit_())
    assert run_pass("superword", over)[0][:2] == ["*(u16 *)(r10 - 0x8) = 0x11ff", "r0 = 0x0"]
    # the half store at -3 lies inside the window from -4 (merged); the byte at -6 has no partner (kept)
    cut = prog(st(1, R10, -4, 0), st(2, R10, -3, 0), st(1, R10, -1, 0), st(1, R10, -6, 0), mov(R0, 0), exit_())
    text, n = run_pass("superword", cut)
    assert n == 1 and text[0] == "*(u32 *)(r10 - 0x4) = 0x0"
