"""Ring buffer records written by programs (bpf_ringbuf_output / reserve+submit/discard), read in Python."""

from __future__ import annotations

import struct
import threading
import time

import pytest
from kprogs import ether, link

from capsule.bpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    Builder,
    alu,
    call_helper,
    exit_,
    jmp,
    ld_map_fd,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel import Map, MapType, ProgFlags, Program, ProgType, RingBuffer, create_ringbuf
from capsule.kernel.consts import RINGBUF_BUSY_BIT, RINGBUF_DISCARD_BIT, Helper

OUTPUT, RESERVE, SUBMIT, DISCARD = (int(Helper.RINGBUF_OUTPUT), int(Helper.RINGBUF_RESERVE),
                                    int(Helper.RINGBUF_SUBMIT), int(Helper.RINGBUF_DISCARD))


def output_program(rb: Map) -> Program:
    """SYSCALL program: ctx = {u64 tag, u32 len}; emits a record of ``len & 63`` bytes + 1, starting with tag
    followed by zero bytes, via bpf_ringbuf_output. Returns the helper's result."""
    b = Builder()
    for off in range(-64, 0, 8):
        b.emit(st(8, FP, off, 0))
    b.emit(ldx(8, R2, R1, 0), stx(8, FP, -64, R2), ldx(4, R3, R1, 8), alu(Alu.AND, R3, 63), alu(Alu.ADD, R3, 1))
    b.emit(ld_map_fd(R1, "rb"), mov(R2, FP), alu(Alu.ADD, R2, -64), mov(R4, 0), call_helper(OUTPUT), exit_())
    return Program.load(ProgType.SYSCALL, link(b.assemble(), {"rb": rb}), name="rb_out",
                        prog_flags=ProgFlags.SLEEPABLE)


def emit(p: Program, tag: int, length: int) -> None:
    r = p.test_run(ctx_in=struct.pack("<QI4x", tag, length - 1))
    assert r.retval == 0


def expected(tag: int, length: int) -> bytes:
    return struct.pack("<Q", tag)[:length].ljust(length, b"\0")


@pytest.mark.requires_bpf
def test_records_from_a_program():
    with create_ringbuf(4096, "rb") as rb, output_program(rb) as p, RingBuffer(rb) as ring:
        assert ring.consume() == [] and ring.available() == 0
        emit(p, 0x1122334455667788, 8)
        emit(p, 7, 3)
        emit(p, 9, 20)
        assert ring.available() == (8 + 8) + (8 + 8) + (8 + 24)  # headers + 8-byte rounding
        seen: list[bytes] = []
        recs = ring.consume(seen.append)
        assert recs == [expected(0x1122334455667788, 8), expected(7, 3), expected(9, 20)]
        assert seen == recs
        assert ring.available() == 0 and ring.consumer_pos == ring.producer_pos


@pytest.mark.requires_bpf
def test_wrap_around_and_limit():
    with create_ringbuf(4096, "rb") as rb, output_program(rb) as p, RingBuffer(rb) as ring:
        got: list[bytes] = []
        tag = 0
        wrapped = False
        for _ in range(6):  # 6 x 40 x 48 bytes = 2.8 ring sizes: positions wrap more than once
            for _ in range(40):
                tag += 1
                emit(p, tag, 40)
            before = ring.consumer_pos
            got += ring.consume(limit=10)  # partial read first
            got += ring.consume()
            wrapped |= (before % 4096) > (ring.consumer_pos % 4096)
        assert wrapped
        assert got == [expected(t, 40) for t in range(1, tag + 1)]


@pytest.mark.requires_bpf
def test_full_ring_refuses_then_recovers():
    with create_ringbuf(4096, "rb") as rb, output_program(rb) as p, RingBuffer(rb) as ring:
        ok = 0
        while True:
            r = p.test_run(ctx_in=struct.pack("<QI4x", ok, 63))
            if r.retval != 0:
                assert r.retval_signed == -11  # -EAGAIN: no room
                break
            ok += 1
        assert ok == 4096 // 72
        assert len(ring.consume()) == ok
        emit(p, 1, 8)  # space released by consume() is usable again
        assert ring.consume() == [expected(1, 8)]


@pytest.mark.requires_bpf
def test_reserve_submit_and_discard():
    # ctx = {u32 submit?}: reserve 16 bytes, fill with 0xab.., then submit or discard
    b = Builder()
    b.emit(ldx(4, R6, R1, 0), ld_map_fd(R1, "rb"), mov(R2, 16), mov(R3, 0), call_helper(RESERVE))
    b.emit(jmp(Jmp.JNE, R0, 0, "got"), mov(R0, 1), exit_())
    b.label("got")
    b.emit(st(8, R0, 0, 0x0A0B0C0D), st(8, R0, 8, -1), mov(R1, R0), mov(R2, 0))
    b.emit(jmp(Jmp.JEQ, R6, 0, "drop"), call_helper(SUBMIT), mov(R0, 0), exit_())
    b.label("drop")
    b.emit(call_helper(DISCARD), mov(R0, 0), exit_())
    with create_ringbuf(4096, "rb") as rb, RingBuffer(rb) as ring:
        with Program.load(ProgType.SYSCALL, link(b.assemble(), {"rb": rb}), prog_flags=ProgFlags.SLEEPABLE) as p:
            for submit in (1, 0, 1, 0, 0):
                assert p.test_run(ctx_in=struct.pack("<I", submit)).retval == 0
        assert ring.available() == 5 * 24
        rec = struct.pack("<Qq", 0x0A0B0C0D, -1)
        assert ring.consume() == [rec, rec]  # discarded records are skipped
        assert ring.available() == 0


@pytest.mark.requires_bpf
def test_xdp_program_output_with_repeat():
    b = Builder()
    b.emit(ldx(4, R2, R1, 4), ldx(4, R3, R1, 0), alu(Alu.SUB, R2, R3), stx(8, FP, -8, R2))  # packet length
    b.emit(ld_map_fd(R1, "rb"), mov(R2, FP), alu(Alu.ADD, R2, -8), mov(R3, 8), mov(R4, 0), call_helper(OUTPUT))
    b.emit(mov(R0, 2), exit_())
    with create_ringbuf(1 << 16, "rb") as rb, RingBuffer(rb) as ring:
        with Program.load(ProgType.XDP, link(b.assemble(), {"rb": rb})) as p:
            p.test_run(ether(b"z" * 100), repeat=25)
        recs = ring.consume()
        assert recs == [struct.pack("<Q", 114)] * 25


@pytest.mark.requires_bpf
def test_wait_times_out_and_wakes():
    with create_ringbuf(4096, "rb") as rb, output_program(rb) as p, RingBuffer(rb) as ring:
        t0 = time.monotonic()
        assert ring.wait(0.05) is False
        assert time.monotonic() - t0 >= 0.04
        producer = threading.Timer(0.05, emit, (p, 5, 8))
        producer.start()
        try:
            t0 = time.monotonic()
            assert ring.wait(5.0) is True
            assert time.monotonic() - t0 < 4.0
        finally:
            producer.join()
        assert ring.poll(0) == [expected(5, 8)]


def test_busy_record_stops_the_reader():
    """A record the producer has reserved but not committed (BUSY) must not be read, nor anything after it."""
    ring = RingBuffer.__new__(RingBuffer)
    page = 4096
    ring.size, ring._mask = 64, 63
    ring._cons = bytearray(8)
    prod = bytearray(page + 128)
    hdr = struct.Struct("<II")
    hdr.pack_into(prod, page + 0, 4, 0)
    prod[page + 8 : page + 12] = b"abcd"
    hdr.pack_into(prod, page + 16, 8 | RINGBUF_DISCARD_BIT, 0)
    hdr.pack_into(prod, page + 32, 8 | RINGBUF_BUSY_BIT, 0)
    hdr.pack_into(prod, page + 48, 4, 0)
    struct.pack_into("<Q", prod, 0, 64)  # producer position
    ring._prod = prod
    assert ring.consume() == [b"abcd"]
    assert ring.consumer_pos == 32  # stopped at the busy record, after skipping the discarded one
    hdr.pack_into(prod, page + 32, 8, 0)  # committed now
    prod[page + 40 : page + 48] = b"12345678"
    prod[page + 56 : page + 60] = b"wxyz"
    assert ring.consume() == [b"12345678", b"wxyz"]


@pytest.mark.requires_bpf
def test_ringbuf_rejects_bad_sizes():
    with pytest.raises(ValueError):
        create_ringbuf(1000)
    with Map.create(MapType.ARRAY, 4, 4, 1) as m, pytest.raises(TypeError):
        RingBuffer(m)
