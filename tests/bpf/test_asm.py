"""capsule.bpf.asm: constructors produce the encodings LLVM's assembler produces, and the Builder resolves
labels.

The reference for each constructor is LLVM itself: the LLVM assembly text next to each case is assembled by
``llvm-mc-19 -triple=bpfel -mattr=+alu32 -show-encoding`` (clang's integrated assembler) and the bytes must
equal ``Insn.encode()``. Pseudo calls, kfunc calls and pseudo ld_imm64 exist in LLVM only through
relocations, so those are checked against the encodings include/uapi/linux/bpf.h documents.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from io import BytesIO

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R9,
    R10,
    AsmError,
    Builder,
    Reg,
    addr_space_cast,
    alu,
    atomic,
    bswap,
    call,
    call_helper,
    call_kfunc,
    cmpxchg,
    exit_,
    gotol,
    ja,
    jmp,
    ld_abs,
    ld_btf_id,
    ld_func,
    ld_imm64,
    ld_ind,
    ld_map_fd,
    ld_map_value,
    ldx,
    ldxs,
    may_goto,
    mov,
    movsx,
    neg,
    resolve,
    sdiv,
    smod,
    st,
    stx,
    to_be,
    to_le,
    xchg,
)
from capsule.bpf.insn import Insn, decode, encode
from capsule.bpf.opcodes import Alu, Atomic, CallKind, Jmp, Pseudo

LLVM_MC = shutil.which("llvm-mc-19")

# (constructor result, LLVM assembly for the same instruction)
CASES: list[tuple[Insn, str]] = [
    (mov(R1, R2), "r1 = r2"),
    (mov(R1, -1), "r1 = -0x1"),
    (mov(R3, 0x7FFFFFFF, w32=True), "w3 = 0x7fffffff"),
    (mov(R3, R4, w32=True), "w3 = w4"),
    (mov(R1, 0xFFFFFFFF, w32=True), "w1 = -0x1"),
    (alu(Alu.ADD, R1, 5), "r1 += 0x5"),
    (alu(Alu.SUB, R2, R3), "r2 -= r3"),
    (alu(Alu.MUL, R4, -7, w32=True), "w4 *= -0x7"),
    (alu(Alu.DIV, R5, R6), "r5 /= r6"),
    (alu(Alu.OR, R0, 0x100), "r0 |= 0x100"),
    (alu(Alu.AND, R0, R1, w32=True), "w0 &= w1"),
    (alu(Alu.LSH, R9, 63), "r9 <<= 0x3f"),
    (alu(Alu.RSH, R9, R1, w32=True), "w9 >>= w1"),
    (alu(Alu.MOD, R2, 10), "r2 %= 0xa"),
    (alu(Alu.XOR, R2, R2, w32=True), "w2 ^= w2"),
    (alu(Alu.ARSH, R3, 4), "r3 s>>= 0x4"),
    (alu(Alu.ARSH, R3, R4, w32=True), "w3 s>>= w4"),
    (neg(R1), "r1 = -r1"),
    (neg(R2, w32=True), "w2 = -w2"),
    (sdiv(R1, R2), "r1 s/= r2"),
    (sdiv(R1, -3, w32=True), "w1 s/= -0x3"),
    (smod(R4, R5, w32=True), "w4 s%= w5"),
    (smod(R4, 9), "r4 s%= 0x9"),
    (movsx(R1, R2, 8), "r1 = (s8)r2"),
    (movsx(R1, R2, 16), "r1 = (s16)r2"),
    (movsx(R1, R2, 32), "r1 = (s32)r2"),
    (movsx(R1, R2, 8, w32=True), "w1 = (s8)w2"),
    (movsx(R1, R2, 16, w32=True), "w1 = (s16)w2"),
    (bswap(R1, 16), "r1 = bswap16 r1"),
    (bswap(R2, 32), "r2 = bswap32 r2"),
    (bswap(R3, 64), "r3 = bswap64 r3"),
    (to_le(R1, 16), "r1 = le16 r1"),
    (to_le(R1, 64), "r1 = le64 r1"),
    (to_be(R1, 32), "r1 = be32 r1"),
    (to_be(R1, 16), "r1 = be16 r1"),
    (addr_space_cast(R1, R2, 0, 1), "r1 = addr_space_cast(r2, 0x0, 0x1)"),
    (addr_space_cast(R3, R3, 1, 0), "r3 = addr_space_cast(r3, 0x1, 0x0)"),
    (ld_imm64(R1, 0x123456789), "r1 = 0x123456789 ll"),
    (ld_imm64(R2, -1), "r2 = -0x1 ll"),
    (ld_imm64(R2, 0xDEADBEEFCAFEF00D), "r2 = -0x2152411035010ff3 ll"),
    (ld_abs(1, 0x17), "r0 = *(u8 *)skb[0x17]"),
    (ld_abs(2, 12), "r0 = *(u16 *)skb[0xc]"),
    (ld_abs(4, 26), "r0 = *(u32 *)skb[0x1a]"),
    (ld_ind(4, R3, 0), "r0 = *(u32 *)skb[r3]"),
    (ld_ind(1, R1, 0), "r0 = *(u8 *)skb[r1]"),
    (ldx(1, R1, R2, 3), "w1 = *(u8 *)(r2 + 0x3)"),
    (ldx(2, R1, R2, -2), "w1 = *(u16 *)(r2 - 0x2)"),
    (ldx(4, R1, R10, -8), "w1 = *(u32 *)(r10 - 0x8)"),
    (ldx(8, R0, R1, 0x7FFF), "r0 = *(u64 *)(r1 + 0x7fff)"),
    (ldxs(1, R1, R2, 0), "r1 = *(s8 *)(r2 + 0x0)"),
    (ldxs(2, R1, R2, -32768), "r1 = *(s16 *)(r2 - 0x8000)"),
    (ldxs(4, R3, R4, 4), "r3 = *(s32 *)(r4 + 0x4)"),
    (st(1, R10, -1, 0x7F), "*(u8 *)(r10 - 0x1) = 0x7f"),
    (st(2, R1, 2, -1), "*(u16 *)(r1 + 0x2) = -0x1"),
    (st(4, R1, 4, 0x12345678), "*(u32 *)(r1 + 0x4) = 0x12345678"),
    (st(8, FP, -16, -5), "*(u64 *)(r10 - 0x10) = -0x5"),
    (stx(1, R1, 0, R2), "*(u8 *)(r1 + 0x0) = w2"),
    (stx(2, R1, 6, R2), "*(u16 *)(r1 + 0x6) = w2"),
    (stx(4, R1, -4, R9), "*(u32 *)(r1 - 0x4) = w9"),
    (stx(8, R10, -8, R1), "*(u64 *)(r10 - 0x8) = r1"),
    (atomic(Atomic.ADD, 8, R1, 0, R2), "lock *(u64 *)(r1 + 0x0) += r2"),
    (atomic(Atomic.OR, 8, R1, 8, R2), "lock *(u64 *)(r1 + 0x8) |= r2"),
    (atomic(Atomic.AND, 8, R1, 8, R2), "lock *(u64 *)(r1 + 0x8) &= r2"),
    (atomic(Atomic.XOR, 8, R1, 8, R2), "lock *(u64 *)(r1 + 0x8) ^= r2"),
    (atomic(Atomic.ADD, 4, R1, 4, R2), "lock *(u32 *)(r1 + 0x4) += w2"),
    (atomic(Atomic.OR, 4, R1, 4, R2), "lock *(u32 *)(r1 + 0x4) |= w2"),
    (atomic(Atomic.AND, 4, R1, 4, R2), "lock *(u32 *)(r1 + 0x4) &= w2"),
    (atomic(Atomic.XOR, 4, R1, 4, R2), "lock *(u32 *)(r1 + 0x4) ^= w2"),
    (atomic(Atomic.ADD, 8, R3, -8, R4, fetch=True), "r4 = atomic_fetch_add((u64 *)(r3 - 0x8), r4)"),
    (atomic(Atomic.OR, 8, R3, 0, R4, fetch=True), "r4 = atomic_fetch_or((u64 *)(r3 + 0x0), r4)"),
    (atomic(Atomic.AND, 8, R3, 0, R4, fetch=True), "r4 = atomic_fetch_and((u64 *)(r3 + 0x0), r4)"),
    (atomic(Atomic.XOR, 8, R3, 0, R4, fetch=True), "r4 = atomic_fetch_xor((u64 *)(r3 + 0x0), r4)"),
    (atomic(Atomic.ADD, 4, R3, 0, R4, fetch=True), "w4 = atomic_fetch_add((u32 *)(r3 + 0x0), w4)"),
    (atomic(Atomic.XOR, 4, R3, 0, R4, fetch=True), "w4 = atomic_fetch_xor((u32 *)(r3 + 0x0), w4)"),
    (xchg(8, R1, 16, R5), "r5 = xchg_64(r1 + 0x10, r5)"),
    (xchg(4, R1, 16, R5), "w5 = xchg32_32(r1 + 0x10, w5)"),
    (cmpxchg(8, R1, -8, R3), "r0 = cmpxchg_64(r1 - 0x8, r0, r3)"),
    (cmpxchg(4, R1, 0, R3), "w0 = cmpxchg32_32(r1 + 0x0, w0, w3)"),
    (jmp(Jmp.JEQ, R1, 5, 3), "if r1 == 0x5 goto +0x3"),
    (jmp(Jmp.JNE, R1, R2, -4), "if r1 != r2 goto -0x4"),
    (jmp(Jmp.JGT, R1, 0, 0), "if r1 > 0x0 goto +0x0"),
    (jmp(Jmp.JGE, R1, R2, 7), "if r1 >= r2 goto +0x7"),
    (jmp(Jmp.JLT, R1, -1, 7), "if r1 < -0x1 goto +0x7"),
    (jmp(Jmp.JLE, R1, R2, 7), "if r1 <= r2 goto +0x7"),
    (jmp(Jmp.JSGT, R1, 2, 7), "if r1 s> 0x2 goto +0x7"),
    (jmp(Jmp.JSGE, R1, R2, 7), "if r1 s>= r2 goto +0x7"),
    (jmp(Jmp.JSLT, R1, 2, 7), "if r1 s< 0x2 goto +0x7"),
    (jmp(Jmp.JSLE, R1, R2, 7), "if r1 s<= r2 goto +0x7"),
    (jmp(Jmp.JSET, R1, 0x80, 7), "if r1 & 0x80 goto +0x7"),
    (jmp(Jmp.JSET, R1, R2, 7), "if r1 & r2 goto +0x7"),
    (jmp(Jmp.JEQ, R1, 5, 3, w32=True), "if w1 == 0x5 goto +0x3"),
    (jmp(Jmp.JSLT, R1, R2, -16, w32=True), "if w1 s< w2 goto -0x10"),
    (jmp(Jmp.JLE, R4, -2, 32767, w32=True), "if w4 <= -0x2 goto +0x7fff"),
    (ja(3), "goto +0x3"),
    (ja(-32768), "goto -0x8000"),
    (gotol(-3), "gotol -0x3"),
    (gotol(0x7000), "gotol +0x7000"),  # LLVM's parser takes 16 bits; wider ones: test_out_of_range_ja
    (may_goto(3), "may_goto +0x3"),
    (call_helper(1), "call 0x1"),
    (call_helper(212), "call 0xd4"),
    (exit_(), "exit"),
]


def llvm_assemble(lines: list[str]) -> list[bytes]:
    """Encodings LLVM's assembler gives each line (alu32 on, so 32-bit operands are spelled with w)."""
    res = subprocess.run(
        [LLVM_MC, "-triple=bpfel", "-mattr=+alu32", "-show-encoding"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0 and not res.stderr, res.stderr
    encs = [
        bytes(int(b, 16) for b in m.split(",")) for m in re.findall(r"# encoding: \[([^\]]*)\]", res.stdout)
    ]
    assert len(encs) == len(lines)
    return encs


@pytest.mark.skipif(LLVM_MC is None, reason="llvm-mc-19 is installed by scripts/setup.sh")
def test_constructors_encode_like_llvm() -> None:
    encs = llvm_assemble([text for _, text in CASES])
    bad = [
        (text, ins.encode().hex(" "), enc.hex(" "))
        for (ins, text), enc in zip(CASES, encs, strict=True)
        if ins.encode() != enc
    ]
    assert not bad, "\n".join(f"{t}: ours {o} llvm {e}" for t, o, e in bad)


def test_symbolic_loads_keep_refs_for_the_loader() -> None:
    m = ld_map_fd(R1, "counters")
    assert (m.code, m.dst, m.src, m.imm, m.ref) == (0x18, 1, Pseudo.MAP_FD, 0, "counters")
    assert m.encode() == bytes.fromhex("1811000000000000 0000000000000000")
    v = ld_map_value(R2, ".bss", 24)
    assert (v.src, v.ref) == (Pseudo.MAP_VALUE, ".bss")
    assert v.encode() == bytes.fromhex("1822000000000000 0000000018000000")  # offset in the high word
    b = ld_btf_id(R3, 77, ref="bpf_prog_active")
    assert b.encode() == bytes.fromhex("183300004d000000 0000000000000000")
    k = call_kfunc("bpf_arena_alloc_pages")
    assert (k.code, k.src, k.ref) == (0x85, CallKind.KFUNC, "bpf_arena_alloc_pages")
    assert k.encode() == bytes.fromhex("8520000000000000")
    # nothing to resolve for the assembler: refs survive resolve()
    out = resolve([m, v, b, k, exit_()])
    assert [i.ref for i in out] == ["counters", ".bss", "bpf_prog_active", "bpf_arena_alloc_pages", None]


def test_register_and_immediate_checks() -> None:
    assert repr(R10) == "r10" and isinstance(FP, Reg) and R10 == 10
    with pytest.raises(AsmError):
        Reg(11)
    with pytest.raises(AsmError, match="Reg"):
        mov(1, R2)  # a plain int is an immediate, never a destination
    with pytest.raises(AsmError, match="32 bits"):
        mov(R1, 1 << 32)
    with pytest.raises(AsmError, match="16 bits"):
        ldx(4, R1, R2, 1 << 15)
    with pytest.raises(AsmError):
        ldx(3, R1, R2, 0)
    with pytest.raises(AsmError):
        ldxs(8, R1, R2, 0)
    with pytest.raises(AsmError):
        movsx(R1, R2, 32, w32=True)
    with pytest.raises(AsmError):
        bswap(R1, 8)
    with pytest.raises(AsmError):
        atomic(Atomic.XCHG, 8, R1, 0, R2)
    with pytest.raises(AsmError):
        atomic(Atomic.ADD, 2, R1, 0, R2)
    with pytest.raises(AsmError):
        jmp(Jmp.JA, R1, 0, 1)
    with pytest.raises(AsmError):
        alu(Alu.NEG, R1, 0)
    with pytest.raises(AsmError):
        ld_abs(8, 0)
    with pytest.raises(AsmError):
        ld_imm64(R1, 1 << 64)


# -- Builder -------------------------------------------------------------------------------------------------
def test_forward_and_backward_jumps_count_ld_imm64_as_two_slots() -> None:
    b = Builder()
    b.emit(mov(R0, 0))
    b.label("loop")  # slot 1
    b.emit(ld_imm64(R2, 1 << 40))  # slots 1-2
    b.emit(jmp(Jmp.JEQ, R1, 0, "done"))  # slot 3
    b.emit(alu(Alu.ADD, R0, R2))  # slot 4
    b.emit(alu(Alu.SUB, R1, 1))  # slot 5
    b.emit(ja("loop"))  # slot 6 -> 1: -6
    b.label("done")
    b.emit(exit_())  # slot 7
    out = b.assemble()
    assert out[2].off == 7 - 3 - 1 and out[2].ref is None
    assert out[5].off == 1 - 6 - 1 and out[5].ref is None
    assert out[1].sym == "loop" and out[6].sym == "done"
    assert b.slots == 8 and len(b) == 7
    # the same program, written with numeric offsets, encodes identically
    manual = [
        mov(R0, 0),
        ld_imm64(R2, 1 << 40),
        jmp(Jmp.JEQ, R1, 0, 3),
        alu(Alu.ADD, R0, R2),
        alu(Alu.SUB, R1, 1),
        ja(-6),
        exit_(),
    ]
    assert encode(out) == encode(manual)
    assert encode(decode(encode(out))) == encode(out)


def test_calls_and_ld_func_resolve_to_relative_slots() -> None:
    b = Builder()
    b.emit(ld_func(R2, "callback"))  # slots 0-1
    b.emit(call("helper"))  # slot 2
    b.emit(exit_())  # slot 3
    b.label("callback")
    b.emit(mov(R0, 0))  # slot 4
    b.emit(exit_())
    b.emit(Insn(0xB7, 0, 0, 0, 1, sym="helper"))  # a label carried on the instruction itself: slot 6
    b.emit(exit_())
    out = b.assemble()
    assert out[0].imm == 4 - 0 - 1 and out[0].ref is None and out[0].src == Pseudo.FUNC
    assert out[1].imm == 6 - 2 - 1 and out[1].src == CallKind.BPF and out[1].ref is None


def test_backward_ld_func_stores_a_signed_low_word() -> None:
    out = resolve([Insn(0xB7, sym="f"), exit_(), ld_func(R1, "f"), exit_()])
    assert out[2].imm == (-3) & 0xFFFFFFFF
    assert out[2].encode()[4:8] == (-3).to_bytes(4, "little", signed=True)
    assert out[2].encode()[12:16] == bytes(4)


def test_undefined_label_is_a_clear_error() -> None:
    b = Builder()
    b.emit(jmp(Jmp.JNE, R1, 0, "nowhere"), exit_())
    with pytest.raises(AsmError, match="undefined label 'nowhere'"):
        b.assemble()


def test_label_errors() -> None:
    b = Builder()
    b.label("x")
    with pytest.raises(AsmError, match="twice"):
        b.label("x")
    b2 = Builder()
    b2.emit(ja("end"))
    b2.label("end")  # nothing follows: a jump there leaves the program
    with pytest.raises(AsmError, match="past the last"):
        b2.assemble()


def _far_program(first: Insn) -> Builder:
    b = Builder()
    b.emit(first)
    for _ in range(40000):
        b.emit(mov(R0, 0))
    b.label("far")
    b.emit(exit_())
    return b


def test_far_conditional_jump_takes_the_long_form() -> None:
    """Beyond 16 bits a conditional jump becomes the inverted condition over a gotol; jset and may_goto, which
    have no inverse, become the jump, a ja over the gotol, and the gotol. Each still lands on its target."""
    out = _far_program(jmp(Jmp.JEQ, R1, 0, "far")).assemble()
    assert out[0].code & 0xF0 == Jmp.JNE and out[0].off == 1 and out[1].is_gotol
    assert 2 + out[1].imm == len(out) - 1  # the gotol reaches the exit
    for first in (jmp(Jmp.JSET, R1, 4, "far"), may_goto("far")):
        out = _far_program(first).assemble()
        assert out[0].off == 1 and out[1].code == Jmp.JA | 0x05 and out[1].off == 1 and out[2].is_gotol
        assert 3 + out[2].imm == len(out) - 1
    with pytest.raises(AsmError, match="16-bit"):
        _far_program(jmp(Jmp.JEQ, R1, 0, "far")).assemble(relax=False)


def test_jump_spanning_kernel_rewrites_keeps_a_margin() -> None:
    """A jump within 16 bits that spans instructions the verifier expands (may_goto, division by a register) is
    widened before the expansion could push it out of range ("cannot be patched due to 16-bit range")."""
    b = Builder()
    b.emit(jmp(Jmp.JEQ, R1, 0, "far"))
    for _ in range(500):
        b.emit(may_goto(1), mov(R0, 0))
    for _ in range(31000):
        b.emit(mov(R0, 0))
    b.label("far")
    b.emit(exit_())
    out = b.assemble()
    assert out[1].is_gotol  # 32,000 slots, in range, but not with 8 more for each of 500 may_gotos


def test_out_of_range_ja_becomes_gotol() -> None:
    out = _far_program(ja("far")).assemble()
    assert out[0].is_gotol and out[0].imm == 40000 and out[0].ref is None
    with pytest.raises(AsmError):
        _far_program(ja("far")).assemble(relax=False)


def test_gotol_and_may_goto_labels() -> None:
    b = Builder()
    b.label("top")
    b.emit(may_goto("out"))
    b.emit(gotol("top"))
    b.label("out")
    b.emit(exit_())
    out = b.assemble()
    assert out[0].off == 1 and out[1].imm == -2


def test_builder_matches_llvm_assembler_with_labels() -> None:
    """A Builder program equals, byte for byte, what LLVM assembles from the same text with labels."""
    if LLVM_MC is None:
        pytest.skip("llvm-mc-19 missing")
    b = Builder()
    b.emit(mov(R0, 0))
    b.label("L1")
    b.emit(jmp(Jmp.JGT, R1, 10, "L2"))
    b.emit(ld_imm64(R3, 0x1122334455667788))
    b.emit(alu(Alu.ADD, R0, R3))
    b.emit(alu(Alu.ADD, R1, 1))
    b.emit(ja("L1"))
    b.label("L2")
    b.emit(exit_())
    text = [
        "r0 = 0",
        "L1:",
        "if r1 > 10 goto L2",
        "r3 = 0x1122334455667788 ll",
        "r0 += r3",
        "r1 += 1",
        "goto L1",
        "L2:",
        "exit",
    ]
    res = subprocess.run(
        [LLVM_MC, "-triple=bpfel", "-filetype=obj", "-o", "/dev/stdout"],
        input=("\n".join(text) + "\n").encode(),
        capture_output=True,
        check=True,
    )
    code = ELFFile(BytesIO(res.stdout)).get_section_by_name(".text").data()
    assert encode(b.assemble()) == code
