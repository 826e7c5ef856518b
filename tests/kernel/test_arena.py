"""Arenas: memory shared by programs and Python through mmap, pages allocated by a kfunc or by touching them."""

from __future__ import annotations

import mmap
import struct

import pytest
from kprogs import ether, link

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    Builder,
    addr_space_cast,
    call_kfunc,
    exit_,
    jmp,
    ld_map_fd,
    ldx,
    mov,
    stx,
)
from capsule.bpf.opcodes import Jmp
from capsule.kernel import Arena, MapType, ProgFlags, Program, ProgType

pytestmark = pytest.mark.requires_bpf

PAGE = mmap.PAGESIZE


def alloc_and_store(arena: Arena) -> Program:
    """SYSCALL program: ctx = {u64 ptr_out, u64 value}. Allocates one arena page with the
    bpf_arena_alloc_pages kfunc, stores ``value`` at its start and returns the page's (user) address in ptr_out.
    Returns 0, or 1 when allocation fails."""
    b = Builder()
    b.emit(mov(R6, R1), ld_map_fd(R1, "arena"), mov(R2, 0), mov(R3, 1), mov(R4, -1), mov(R5, 0))
    b.emit(call_kfunc("bpf_arena_alloc_pages"))
    b.emit(jmp(Jmp.JEQ, R0, 0, "fail"))
    b.emit(stx(8, R6, 0, R0), addr_space_cast(R1, R0, 0, 1), ldx(8, R2, R6, 8), stx(8, R1, 0, R2))
    b.emit(mov(R0, 0), exit_())
    b.label("fail")
    b.emit(mov(R0, 1), exit_())
    return Program.load(ProgType.SYSCALL, link(b.assemble(), {"arena": arena}), name="arena_alloc",
                        prog_flags=ProgFlags.SLEEPABLE)


def read_at(arena: Arena, offset: int, ptype: ProgType = ProgType.XDP) -> Program:
    """A program returning the u32 at arena ``offset`` (the arena is referenced so the program is tied to it)."""
    ptr = arena.ptr32(offset)
    insns = [ld_map_fd(R2, "arena"), mov(R1, ptr), addr_space_cast(R1, R1, 0, 1), ldx(4, R0, R1, 0), exit_()]
    flags = ProgFlags.SLEEPABLE if ptype == ProgType.SYSCALL else 0
    return Program.load(ptype, link(insns, {"arena": arena}), name="arena_read", prog_flags=flags)


def test_arena_create_and_map():
    with Arena.create_arena(16, name="a16") as arena:
        assert arena.type == MapType.ARENA
        assert arena.size == 16 * PAGE and len(arena.memory) == 16 * PAGE
        assert arena.user_vm_start % PAGE == 0
        # the mapping does not cross a 4 GiB boundary, so low 32 bits are a stable offset
        assert arena.user_vm_start >> 32 == (arena.user_vm_start + arena.size - 1) >> 32
        info = arena.info()
        assert info.type == MapType.ARENA and info.max_entries == 16
        assert info.map_extra == 0  # no fixed address was asked for


def test_program_allocates_and_writes_python_reads():
    with Arena.create_arena(8, name="arena") as arena, alloc_and_store(arena) as prog:
        r = prog.test_run(ctx_in=struct.pack("<QQ", 0, 0xFEEDFACE_CAFEBEEF))
        assert r.retval == 0
        ptr = struct.unpack_from("<Q", r.ctx_out)[0]
        off = arena.offset_of(ptr)
        assert off % PAGE == 0
        assert arena.read(off, 8) == struct.pack("<Q", 0xFEEDFACE_CAFEBEEF)
        # a second allocation gets a different page
        r2 = prog.test_run(ctx_in=struct.pack("<QQ", 0, 5))
        off2 = arena.offset_of(struct.unpack_from("<Q", r2.ctx_out)[0])
        assert off2 != off and arena.read(off2, 8) == struct.pack("<Q", 5)


def test_python_writes_program_reads():
    with Arena.create_arena(4, name="arena") as arena:
        off = 2 * PAGE + 16
        with read_at(arena, off) as xdp, read_at(arena, off, ProgType.SYSCALL) as sysp:
            assert xdp.test_run(ether()).retval == 0  # page not there yet: reads as zero
            arena.write(off, struct.pack("<I", 0xC0FFEE))  # touching the page from Python allocates it
            assert xdp.test_run(ether()).retval == 0xC0FFEE
            assert sysp.test_run(ctx_in=bytes(8)).retval == 0xC0FFEE
            arena.memory[off : off + 4] = struct.pack("<I", 77)
            assert xdp.test_run(ether()).retval == 77


def test_program_allocation_visible_to_a_non_sleepable_reader():
    with Arena.create_arena(4, name="arena") as arena, alloc_and_store(arena) as alloc:
        r = alloc.test_run(ctx_in=struct.pack("<QQ", 0, 123456))
        off = arena.offset_of(struct.unpack_from("<Q", r.ctx_out)[0])
        with read_at(arena, off) as xdp:
            assert xdp.test_run(ether()).retval == 123456


def test_fixed_address_arena():
    address = 0x7E00_0000_0000  # 4 GiB aligned, far from where glibc and Python put things
    with Arena.create_arena(2, name="fixed", address=address) as arena, alloc_and_store(arena) as prog:
        assert arena.user_vm_start == address
        r = prog.test_run(ctx_in=struct.pack("<QQ", 0, 99))
        ptr = struct.unpack_from("<Q", r.ctx_out)[0]
        assert address <= ptr < address + arena.size
        assert arena.read(ptr - address, 8) == struct.pack("<Q", 99)


def test_4g_aligned_arena_offsets_are_pointers():
    with Arena.create_arena(4, name="window", align_4g=True) as arena:
        assert arena.user_vm_start % (1 << 32) == 0 and arena.base32 == 0
        assert arena.ptr32(PAGE + 8) == PAGE + 8
        arena.write(PAGE + 8, struct.pack("<I", 31337))
        with read_at(arena, PAGE + 8) as xdp:
            assert xdp.test_run(ether()).retval == 31337


def test_unmap_and_errors():
    arena = Arena.create_arena(1, name="a", map_now=False)
    try:
        with pytest.raises(ValueError):
            _ = arena.memory
        with pytest.raises(ValueError):
            arena.ptr32(0)  # the address is chosen by the first mmap
        view = arena.map()
        assert arena.map() is view  # mapped once
        with pytest.raises(ValueError):
            arena.offset_of(arena.user_vm_start + PAGE)
    finally:
        arena.close()
    assert arena.closed
    with pytest.raises(ValueError):
        Arena.create_arena(1, address=123)
