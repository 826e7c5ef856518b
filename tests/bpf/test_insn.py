"""capsule.bpf.insn: the 8-byte encoding, ld_imm64 as one 16-byte instruction, and malformed input."""

from __future__ import annotations

import random
import struct

import pytest

from capsule.bpf.insn import SLOT, DecodeError, Insn, decode, encode, slot_offsets


def random_stream(rng: random.Random, n: int) -> bytes:
    """Arbitrary slots, with well-formed ld_imm64 pairs mixed in (any other byte pattern is a valid slot)."""
    out = bytearray()
    for _ in range(n):
        if rng.random() < 0.15:
            regs = rng.randrange(256)
            out += struct.pack(
                "<BBhi", 0x18, regs, rng.randrange(-32768, 32768), rng.randrange(-(2**31), 2**31)
            )
            out += struct.pack("<BBhi", 0, 0, 0, rng.randrange(-(2**31), 2**31))
        else:
            code = rng.randrange(256)
            if code == 0x18:
                code = 0x17
            out += struct.pack(
                "<BBhi",
                code,
                rng.randrange(256),
                rng.randrange(-32768, 32768),
                rng.randrange(-(2**31), 2**31),
            )
    return bytes(out)


@pytest.mark.parametrize("seed", range(5))
def test_random_streams_roundtrip_exactly(seed: int) -> None:
    rng = random.Random(seed)
    data = random_stream(rng, 400)
    insns = decode(data)
    assert encode(insns) == data
    assert sum(i.slots() for i in insns) * SLOT == len(data)
    for ins in insns:  # fields come back in their documented ranges
        assert 0 <= ins.dst < 16 and 0 <= ins.src < 16 and -32768 <= ins.off < 32768
        assert 0 <= ins.imm < 2**64 if ins.is_ld_imm64 else -(2**31) <= ins.imm < 2**31


def test_field_layout() -> None:
    # r3 = *(u32 *)(r10 - 8): LDX|W|MEM, dst in the low nibble, src in the high nibble, off little-endian s16
    ins = decode(bytes.fromhex("61a3f8ff00000000"))[0]
    assert (ins.code, ins.dst, ins.src, ins.off, ins.imm) == (0x61, 3, 10, -8, 0)
    assert Insn(0xB7, 1, 0, 0, -1).encode() == bytes.fromhex("b7010000ffffffff")
    # an unsigned spelling of a negative immediate encodes the same bits
    assert Insn(0xB7, 1, 0, 0, 0xFFFFFFFF).encode() == Insn(0xB7, 1, 0, 0, -1).encode()


def test_ld_imm64_is_one_insn_with_an_unsigned_64_bit_immediate() -> None:
    data = bytes.fromhex("18010000 0df0feca 00000000 efbeadde".replace(" ", "")) + bytes.fromhex(
        "9500000000000000"
    )
    insns = decode(data)
    assert len(insns) == 2 and insns[0].is_ld_imm64 and insns[0].slots() == 2
    assert insns[0].imm == 0xDEADBEEFCAFEF00D
    assert slot_offsets(insns) == [0, 2]
    assert Insn(0x18, 1, 0, 0, -1).encode() == bytes.fromhex("18010000ffffffff00000000ffffffff")
    assert encode(insns) == data


def test_slot_offsets_and_jump_helpers() -> None:
    insns = [Insn(0xB7), Insn(0x18, 1), Insn(0x05, off=-3), Insn(0x06, imm=7), Insn(0x85, imm=1), Insn(0x95)]
    assert slot_offsets(insns) == [0, 1, 3, 4, 5, 6]
    ja, gotol, call, exit_ = insns[2], insns[3], insns[4], insns[5]
    assert ja.is_jump and gotol.is_jump and gotol.is_gotol and not ja.is_gotol
    assert not call.is_jump and call.is_call and exit_.is_exit and not exit_.is_jump
    assert ja.jump_offset() == -3 and gotol.jump_offset() == 7
    assert ja.with_jump_offset(5).off == 5 and gotol.with_jump_offset(-9).imm == -9
    assert Insn(0xE5, off=2).is_jump  # may_goto
    assert Insn(0x16, 1, off=2).is_jump  # JMP32
    assert not Insn(0x07).is_jump


def test_refs_do_not_change_the_encoding() -> None:
    a = Insn(0x85, 0, 2, 0, 0, ref="bpf_arena_alloc_pages", sym="here")
    assert a.encode() == Insn(0x85, 0, 2).encode()
    assert "ref='bpf_arena_alloc_pages'" in repr(a)


@pytest.mark.parametrize(
    "data,match",
    [
        (b"\x95" + bytes(6), "multiple of 8"),
        (bytes(9), "multiple of 8"),
        (bytes.fromhex("1801000005000000"), "missing its second half"),
        (bytes.fromhex("9500000000000000 1801000005000000".replace(" ", "")), "slot 1 is missing"),
        (bytes.fromhex("1801000005000000 0001000000000000".replace(" ", "")), "malformed second half"),
        (bytes.fromhex("1801000005000000 1800000000000000".replace(" ", "")), "malformed second half"),
        (bytes.fromhex("1801000005000000 0000010000000000".replace(" ", "")), "malformed second half"),
    ],
)
def test_decode_errors(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode(data)


def test_empty() -> None:
    assert decode(b"") == [] and encode([]) == b"" and slot_offsets([]) == []
