"""The ``align`` pass: byte-wise loads and stores merged into wide ones where the pieces, their order, the
alignment and every access in between allow it (the packed structs of the Sysdig probe are full of them),
and the variants it must leave alone; what makes it cheap must not change what it finds."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
    alu,
    call_helper,
    exit_,
    ld_map_value,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu
from capsule.kernel.consts import ProgType
from capsule.opt.analysis import Analysis
from capsule.opt.blockvals import BlockValues
from capsule.opt.passes.align import Align
from capsule.opt.passes.base import Edits
from capsule.opt.rewrite import Code

from .fixtures import FILLER, MV, PKT, packet_prog, prog, run_pass

END = (mov(R0, 0), exit_())


def _mv(*body):
    return prog(*MV, *body, *END)


def _lines(ps) -> tuple[list[str], int]:
    out, n = run_pass("align", ps)
    return out[2:-2], n


def _spilled(*after):
    # byte 0 goes through the stack (register pressure): load, spill, ..., fill, store
    return (ldx(1, R1, R8, 0), stx(8, R10, -8, R1), ldx(1, R2, R8, 1), ldx(1, R3, R8, 2), ldx(1, R4, R8, 3),
            stx(1, R7, 1, R2), stx(1, R7, 2, R3), stx(1, R7, 3, R4), ldx(8, R1, R10, -8), stx(1, R7, 0, R1), *after)


def _copy_and_decode(*, extra=()):
    return (ldx(1, R2, R8, 0x28), ldx(1, R3, R8, 0x29), ldx(1, R4, R8, 0x2a), ldx(1, R1, R8, 0x2b),
            stx(1, R7, 0x19, R1), stx(1, R7, 0x18, R4), stx(1, R7, 0x17, R3), stx(1, R7, 0x16, R2), *extra,
            alu(Alu.LSH, R3, 8), alu(Alu.OR, R3, R2), alu(Alu.LSH, R4, 16), alu(Alu.LSH, R1, 24),
            alu(Alu.OR, R1, R4), alu(Alu.OR, R1, R3), alu(Alu.ADD, R1, 0x1a), stx(8, R7, 0x14, R1))


def _u64_bytewise(*after) -> tuple:
    """clang's 8-byte load from a packed struct at ``r8 + 0x1c`` (two 4-byte halves, the high one 32-bit),
    into r5, as the Sysdig probe has it."""
    return (mov(R0, 0),
            ldx(1, R3, R8, 0x1c), ldx(1, R5, R8, 0x1d), alu(Alu.LSH, R5, 8), alu(Alu.OR, R5, R3),
            ldx(1, R9, R8, 0x1e), alu(Alu.LSH, R9, 16), ldx(1, R3, R8, 0x1f), alu(Alu.LSH, R3, 24),
            alu(Alu.OR, R3, R9), alu(Alu.OR, R3, R5),
            ldx(1, R4, R8, 0x21), alu(Alu.LSH, R4, 8, w32=True), ldx(1, R5, R8, 0x20), alu(Alu.OR, R4, R5, w32=True),
            ldx(1, R9, R8, 0x22), alu(Alu.LSH, R9, 16, w32=True), ldx(1, R5, R8, 0x23),
            alu(Alu.LSH, R5, 24, w32=True), alu(Alu.OR, R5, R9, w32=True), alu(Alu.OR, R5, R4, w32=True),
            alu(Alu.LSH, R5, 32), alu(Alu.OR, R5, R3),
            *after, stx(8, R7, 0, R5), exit_())


def test_align_merges_byte_loads_from_the_packet() -> None:
    ps = packet_prog(ldx(1, R1, R7, 13), alu(Alu.LSH, R1, 8, w32=True), ldx(1, R2, R7, 12),
              alu(Alu.OR, R1, R2, w32=True), stx(8, R10, -8, R1))
    out, n = run_pass("align", ps)
    assert n == 1
    assert out[len(PKT):len(PKT) + 2] == ["r1 = *(u16 *)(r7 + 0xc)", "*(u64 *)(r10 - 0x8) = r1"]


def test_align_merges_four_bytes_and_two_halves() -> None:
    ps = packet_prog(ldx(1, R1, R7, 3), alu(Alu.LSH, R1, 24), ldx(1, R2, R7, 2), alu(Alu.LSH, R2, 16),
              alu(Alu.OR, R1, R2), ldx(2, R2, R7, 0), alu(Alu.OR, R1, R2), stx(8, R10, -8, R1))
    out, _ = run_pass("align", ps)
    assert "r1 = *(u32 *)(r7 + 0x0)" in out and len(out) == len(PKT) + 2 + 2


def test_align_leaves_wrong_order_reused_parts_and_interleaved_stores() -> None:
    big_endian = packet_prog(ldx(1, R1, R7, 12), alu(Alu.LSH, R1, 8), ldx(1, R2, R7, 13), alu(Alu.OR, R1, R2),
                      stx(8, R10, -8, R1))
    assert run_pass("align", big_endian)[1] == 0
    reused = packet_prog(ldx(1, R1, R7, 13), alu(Alu.LSH, R1, 8), ldx(1, R2, R7, 12), alu(Alu.OR, R1, R2),
                  stx(8, R10, -8, R2))
    assert run_pass("align", reused)[1] == 0
    clobbered = packet_prog(ldx(1, R1, R7, 13), alu(Alu.LSH, R1, 8), st(1, R7, 12, 0), ldx(1, R2, R7, 12),
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
    ps = packet_prog(ldx(4, R4, R7, 0), mov(R2, R4), alu(Alu.RSH, R2, 8), stx(1, R7, 5, R2), stx(1, R7, 4, R4))
    out, n = run_pass("align", ps)
    assert n == 1
    assert out[len(PKT):len(PKT) + 2] == ["r4 = *(u32 *)(r7 + 0x0)", "*(u16 *)(r7 + 0x4) = r4"]


def test_value_shifted_in_place_stored_from_the_last_intact_point() -> None:
    # clang's last piece: ``*(u8 *)(r7 + 0) = r2; r2 >>= 8; *(u8 *)(r7 + 1) = r2``: r2 is no longer the value
    body = (ldx(8, R2, R8, 0),
            mov(R4, R2), alu(Alu.RSH, R4, 24), stx(1, R7, 3, R4),
            mov(R4, R2), alu(Alu.RSH, R4, 16), stx(1, R7, 2, R4),
            stx(1, R7, 0, R2), alu(Alu.RSH, R2, 8), stx(1, R7, 1, R2))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert out == ["r2 = *(u64 *)(r8 + 0x0)", "*(u32 *)(r7 + 0x0) = r2"]


def test_shifted_value_still_read_later_keeps_its_shift() -> None:
    body = (ldx(8, R2, R8, 0), stx(1, R7, 0, R2), alu(Alu.RSH, R2, 8), stx(1, R7, 1, R2), mov(R0, R2), exit_())
    out, n = run_pass("align", prog(*MV, *body))
    assert n == 1
    assert out[2:] == ["r2 = *(u64 *)(r8 + 0x0)", "*(u16 *)(r7 + 0x0) = r2", "r2 >>= 0x8", "r0 = r2", "exit"]


def test_one_value_stored_to_two_places_interleaved() -> None:
    body = (ldx(8, R1, R8, 0),
            mov(R2, R1), alu(Alu.RSH, R2, 8), stx(1, R7, 0x15, R2), stx(1, R7, 0x1d, R2),
            stx(1, R7, 0x14, R1), stx(1, R7, 0x1c, R1))
    out, n = _lines(_mv(*body))
    assert n == 2
    # the shift both groups read stays for the dead code passes
    assert out == ["r1 = *(u64 *)(r8 + 0x0)", "r2 = r1", "r2 >>= 0x8", "*(u16 *)(r7 + 0x14) = r1",
                   "*(u16 *)(r7 + 0x1c) = r1"]


def test_four_byte_window_of_a_five_byte_group() -> None:
    body = (ldx(8, R1, R8, 0), mov(R2, R1), alu(Alu.RSH, R2, 32), stx(1, R7, 4, R2),
            mov(R3, R1), alu(Alu.RSH, R3, 16), stx(2, R7, 2, R3), stx(2, R7, 0, R1))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert "*(u32 *)(r7 + 0x0) = r1" in out and "*(u8 *)(r7 + 0x4) = r2" in out
    assert not any("u16" in s for s in out)


def test_copy_feeding_a_kept_shift_stays() -> None:
    # regression: ``r4 = r2`` fed both a piece's shift and a shift read elsewhere; deleting the copy alone
    # left the kept shift reading a stale r4
    body = (ldx(8, R2, R8, 0), mov(R4, R2), alu(Alu.RSH, R4, 8), stx(1, R7, 1, R4), stx(1, R7, 0, R2),
            mov(R0, R4), exit_())
    out, n = run_pass("align", prog(*MV, *body))
    assert n == 1
    assert out[2:] == ["r2 = *(u64 *)(r8 + 0x0)", "r4 = r2", "r4 >>= 0x8", "*(u16 *)(r7 + 0x0) = r2", "r0 = r4",
                       "exit"]


def test_stores_left_alone_across_an_overlapping_read_a_call_or_an_unknown_pointer() -> None:
    pieces = (mov(R2, R1), alu(Alu.RSH, R2, 8))
    read = (ldx(8, R1, R8, 0), *pieces, stx(1, R7, 1, R2), ldx(1, R3, R7, 0), stx(1, R7, 0, R1), stx(8, R8, 8, R3))
    assert run_pass("align", _mv(*read))[1] == 0
    called = (ldx(8, R6, R8, 0), mov(R2, R6), alu(Alu.RSH, R2, 8), stx(1, R7, 1, R2), call_helper(5),
              stx(1, R7, 0, R6))
    assert run_pass("align", _mv(*called))[1] == 0
    # r5 comes from memory: it may point into the same map value
    unknown = (ldx(8, R1, R8, 0), ldx(8, R5, R8, 8), *pieces, stx(1, R7, 1, R2), st(1, R5, 0, 0), stx(1, R7, 0, R1))
    assert run_pass("align", _mv(*unknown))[1] == 0


def test_stores_merge_across_disjoint_accesses() -> None:
    # a store to other bytes of the same base and a stack store in between do not matter
    body = (ldx(8, R1, R8, 0), mov(R2, R1), alu(Alu.RSH, R2, 8), stx(1, R7, 1, R2), st(4, R7, 8, 0),
            st(8, R10, -8, 0), stx(1, R7, 0, R1))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert "*(u16 *)(r7 + 0x0) = r1" in out and not any("u8" in s for s in out)


def test_stack_stores_stay_aligned() -> None:
    odd = (ldx(8, R1, R8, 0), mov(R2, R1), alu(Alu.RSH, R2, 8), stx(1, R10, -6, R2), stx(1, R10, -7, R1))
    assert run_pass("align", _mv(*odd))[1] == 0
    even = (ldx(8, R1, R8, 0), mov(R2, R1), alu(Alu.RSH, R2, 8), stx(1, R10, -5, R2), stx(1, R10, -6, R1))
    assert run_pass("align", _mv(*even))[1] == 1


def test_byte_copy_between_map_values() -> None:
    body = (ldx(1, R1, R8, 5), ldx(1, R2, R8, 4), ldx(1, R3, R8, 7), ldx(1, R4, R8, 6),
            stx(1, R7, 2, R4), stx(1, R7, 3, R3), stx(1, R7, 0, R2), stx(1, R7, 1, R1))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert out == ["r4 = *(u32 *)(r8 + 0x4)", "*(u32 *)(r7 + 0x0) = r4"]


def test_byte_copy_through_a_spilled_piece() -> None:
    out, n = _lines(_mv(*_spilled()))
    assert n == 1
    assert out == ["r4 = *(u32 *)(r8 + 0x0)", "*(u32 *)(r7 + 0x0) = r4"]


def test_byte_copy_windows_around_pieces() -> None:
    # bytes 3..4 are one u16 piece: bytes 0..1 make a u16 copy, 2 and 3..4 stay
    body = (ldx(1, R1, R8, 0), stx(8, R10, -8, R1), ldx(1, R2, R8, 1), ldx(1, R3, R8, 2), ldx(2, R4, R8, 3),
            stx(1, R7, 1, R2), stx(1, R7, 2, R3), stx(2, R7, 3, R4), ldx(8, R1, R10, -8), stx(1, R7, 0, R1))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert out == ["r2 = *(u16 *)(r8 + 0x0)", "r3 = *(u8 *)(r8 + 0x2)", "r4 = *(u16 *)(r8 + 0x3)",
                   "*(u16 *)(r7 + 0x0) = r2", "*(u8 *)(r7 + 0x2) = r3", "*(u16 *)(r7 + 0x3) = r4"]


def test_spilled_piece_kept_when_its_slot_is_read_again() -> None:
    reread = _spilled(ldx(8, R5, R10, -8), stx(8, R8, 8, R5))
    out, n = _lines(_mv(*reread))
    assert n == 1  # 0..1 would need the spilled piece: 1..2 merge
    assert "*(u64 *)(r10 - 0x8) = r1" in out and "r1 = *(u64 *)(r10 - 0x8)" in out
    assert "*(u16 *)(r7 + 0x1) = r3" in out
    # a store into the slot between spill and fill (the fill reads something else) and a call there
    for between in (st(4, R10, -4, 0), call_helper(5)):
        body = list(_spilled())
        body.insert(2, between)
        out, _ = _lines(_mv(*body))
        assert "*(u64 *)(r10 - 0x8) = r1" in out and "*(u8 *)(r7 + 0x0) = r1" in out


def test_byte_copies_left_alone_when_unsafe() -> None:
    # a store to a source byte between the loads
    clobber = (ldx(1, R1, R8, 0), st(1, R8, 1, 9), ldx(1, R2, R8, 1), stx(1, R7, 0, R1), stx(1, R7, 1, R2))
    assert run_pass("align", _mv(*clobber))[1] == 0
    # a piece stored before the other is loaded (the ranges may overlap: r7 and r7 + 1)
    early = (ldx(1, R1, R7, 0), stx(1, R7, 1, R1), ldx(1, R2, R7, 1), stx(1, R7, 2, R2))
    assert run_pass("align", _mv(*early))[1] == 0
    # a loaded byte read twice
    reused = (ldx(1, R1, R8, 0), ldx(1, R2, R8, 1), stx(1, R7, 0, R1), stx(1, R7, 1, R2), mov(R0, R1), exit_())
    assert run_pass("align", prog(*MV, *reused))[1] == 0
    # into the context of a tracepoint: its fields have their own sizes
    ctx = (mov(R6, R1), ldx(1, R1, R8, 0), ldx(1, R2, R8, 1), stx(1, R6, 0, R1), stx(1, R6, 1, R2))
    assert run_pass("align", prog(*MV, *ctx, *END, ptype=ProgType.RAW_TRACEPOINT))[1] == 0
    # a load reading bytes one store of the copy wrote
    reread = (ldx(1, R1, R8, 0), ldx(1, R2, R8, 1), stx(1, R7, 0, R1), ldx(1, R5, R7, 0), stx(1, R7, 1, R2),
              stx(8, R8, 8, R5))
    assert run_pass("align", _mv(*reread))[1] == 0


def test_interleaved_byte_copy_between_two_maps() -> None:
    # ``memcpy`` unrolled: load, store, load, store; r7 and r8 point into different maps, so reordering is safe
    body = (ldx(1, R3, R8, 0x89), stx(1, R7, 1, R3), ldx(1, R3, R8, 0x88), stx(1, R7, 0, R3))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert out == ["r3 = *(u16 *)(r8 + 0x88)", "*(u16 *)(r7 + 0x0) = r3"]


def test_interleaved_byte_copy_left_alone_when_the_ranges_may_overlap() -> None:
    # r6 is r7 again: byte 1 is stored before it is read (a wide copy would read the old byte)
    same_map = (ld_map_value(R6, ".bss", 0), ldx(1, R3, R6, 2), stx(1, R7, 1, R3), ldx(1, R3, R6, 1),
                stx(1, R7, 0, R3))
    assert run_pass("align", _mv(*same_map))[1] == 0
    overlapping = (ldx(1, R3, R7, 1), stx(1, R7, 2, R3), ldx(1, R3, R7, 2), stx(1, R7, 3, R3))
    assert run_pass("align", _mv(*overlapping))[1] == 0
    # r5 came from memory: it may point anywhere
    unknown = (ldx(8, R5, R8, 0), ldx(1, R3, R5, 1), stx(1, R7, 1, R3), ldx(1, R3, R5, 0), stx(1, R7, 0, R3))
    assert run_pass("align", _mv(*unknown))[1] == 0
    # same base, apart: fine
    apart = (ldx(1, R3, R7, 9), stx(1, R7, 1, R3), ldx(1, R3, R7, 8), stx(1, R7, 0, R3))
    assert run_pass("align", _mv(*apart))[1] == 1


def test_bytes_copied_and_decoded_become_one_load_and_one_store() -> None:
    out, n = _lines(_mv(*_copy_and_decode()))
    assert n >= 1  # the inner half first, then the whole
    assert out == ["r1 = *(u32 *)(r8 + 0x28)", "*(u32 *)(r7 + 0x16) = r1", "r1 += 0x1a", "*(u64 *)(r7 + 0x14) = r1"]


def test_copied_and_decoded_into_another_register() -> None:
    body = (ldx(1, R2, R8, 0), ldx(1, R3, R8, 1), stx(1, R7, 0, R2), stx(1, R7, 1, R3), alu(Alu.LSH, R3, 8),
            alu(Alu.OR, R2, R3), stx(8, R7, 8, R2))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert out == ["r3 = *(u16 *)(r8 + 0x0)", "*(u16 *)(r7 + 0x0) = r3", "r2 = r3", "*(u64 *)(r7 + 0x8) = r2"]


def test_copied_and_decoded_left_alone_when_unsafe() -> None:
    # the copy's destination overlaps the source in the same map value, stores interleaved with the loads
    body = (ldx(1, R2, R7, 0), stx(1, R7, 1, R2), ldx(1, R3, R7, 1), stx(1, R7, 2, R3), alu(Alu.LSH, R3, 8),
            alu(Alu.OR, R2, R3), stx(8, R7, 8, R2))
    assert run_pass("align", _mv(*body))[1] == 0
    # a piece's register rewritten between its load and the composition by something else
    clobber = (ldx(1, R2, R8, 0), ldx(1, R3, R8, 1), stx(1, R7, 0, R2), stx(1, R7, 1, R3), mov(R5, R3),
               alu(Alu.LSH, R5, 8), alu(Alu.OR, R2, R5), stx(8, R7, 8, R2), mov(R0, R3), exit_())
    assert run_pass("align", prog(*MV, *clobber))[1] == 0
    # a call between the stores
    called = _copy_and_decode(extra=())
    called = called[:5] + (call_helper(5),) + called[5:]
    assert run_pass("align", _mv(*called))[1] == 0


def test_load_whose_last_piece_overwrites_the_base() -> None:
    body = (mov(R0, R8), ldx(2, R2, R0, 0x28), ldx(1, R3, R0, 0x2a), alu(Alu.LSH, R3, 16), ldx(1, R0, R0, 0x2b),
            alu(Alu.LSH, R0, 24), alu(Alu.OR, R0, R3), alu(Alu.OR, R0, R2), stx(8, R7, 0, R0))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert out == ["r0 = r8", "r0 = *(u32 *)(r0 + 0x28)", "*(u64 *)(r7 + 0x0) = r0"]


def test_load_at_the_last_piece_left_alone_when_unsafe() -> None:
    # a store to the source bytes between the piece loads
    body = (mov(R0, R8), ldx(1, R2, R0, 0x28), st(1, R8, 0x29, 7), ldx(1, R0, R0, 0x29), alu(Alu.LSH, R0, 8),
            alu(Alu.OR, R0, R2), stx(8, R7, 0, R0))
    assert run_pass("align", _mv(*body))[1] == 0
    # a call between them
    called = (mov(R6, R8), ldx(1, R9, R6, 0x28), call_helper(5), ldx(1, R6, R6, 0x29), alu(Alu.LSH, R6, 8),
              alu(Alu.OR, R6, R9), stx(8, R7, 0, R6))
    assert run_pass("align", _mv(*called))[1] == 0


def test_byte_copy_through_copies_of_the_destination_pointer() -> None:
    # clang juggles the pointer between registers: r6 and r5 both hold r7
    body = (mov(R6, R7), ldx(1, R2, R8, 0), ldx(1, R3, R8, 1), stx(1, R6, 0, R2), mov(R5, R6), stx(1, R5, 1, R3))
    out, n = _lines(_mv(*body))
    assert n == 1
    assert "r3 = *(u16 *)(r8 + 0x0)" in out and "*(u16 *)(r5 + 0x0) = r3" in out


def test_nested_composition_merged_whole_in_one_rewrite() -> None:
    out, n = run_pass("align", prog(*MV, *_u64_bytewise()))
    assert n == 1  # not the 2-byte, then 4-byte, then 8-byte halves one round after the other
    assert out[2:] == ["r0 = 0x0", "r5 = *(u64 *)(r8 + 0x1c)", "*(u64 *)(r7 + 0x0) = r5", "exit"]


def test_composition_in_a_long_block_merged_in_one_round() -> None:
    # r9's shifted piece is not overwritten for more than WINDOW instructions: still known to have one reader
    ps = prog(*MV, *_u64_bytewise(*FILLER))
    code = Code.from_program(ps)
    e = Edits()
    Align().find(Analysis.of(code, ps.type), e)
    assert e.rewrites == 1
    out, _ = run_pass("align", ps)
    assert out[3] == "r5 = *(u64 *)(r8 + 0x1c)" and len(out) == 2 + 1 + 1 + len(FILLER) + 2


def test_remembered_traces_equal_fresh_ones_at_every_depth() -> None:
    ps = prog(*MV, *_u64_bytewise())
    a = Analysis.of(Code.from_program(ps), ps.type)
    ors = [i for i, ins in enumerate(a.code.insns) if (ins.code & 0xF0) == Alu.OR]
    p = Align()
    p._ids = BlockValues(a)
    for depth in (0, 18, 22, 24, 25):
        for i in ors:
            for reg in (a.code.insns[i].dst, a.code.insns[i].src):
                p._traced = {}
                fresh = p._trace(a, reg, i, False, depth)
                for warm in (0, depth):  # remembered from a shallower call, and from one as deep
                    p._traced = {}
                    for j in ors:
                        p._trace(a, a.code.insns[j].dst, j, False, warm)
                    assert p._trace(a, reg, i, False, depth) == fresh
    p._traced = {}
    assert p._trace(a, R5, ors[-1], False, 0) is not None and p._trace(a, R5, ors[-1], False, 25) is None
