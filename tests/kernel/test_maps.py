"""Maps from both sides: Python writes and a program reads, a program writes and Python reads."""

from __future__ import annotations

import errno
import struct

import pytest
from kprogs import ether, link

from capsule.bpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    Builder,
    alu,
    call_helper,
    exit_,
    jmp,
    ld_imm64,
    ld_map_fd,
    ld_map_value,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import MapSpec
from capsule.kernel import BPFError, Map, MapFlags, MapType, Program, ProgType, VerifierError, possible_cpus
from capsule.kernel.consts import Helper, UpdateFlags

pytestmark = pytest.mark.requires_bpf

LOOKUP, UPDATE, TAIL_CALL = int(Helper.MAP_LOOKUP_ELEM), int(Helper.MAP_UPDATE_ELEM), int(Helper.TAIL_CALL)


def lookup_then(key: int, body: list, map_name: str = "m", miss: int = 0, key_size: int = 4) -> list:
    """r0 = lookup(map, &key); if r0 == NULL return ``miss``; then ``body`` (which must exit)."""
    b = Builder()
    b.emit(st(key_size, FP, -8, key), ld_map_fd(R1, map_name), mov(R2, FP), alu(Alu.ADD, R2, -8),
           call_helper(LOOKUP))
    b.emit(jmp(Jmp.JEQ, R0, 0, "miss"))
    b.emit(*body)
    b.label("miss")
    b.emit(mov(R0, miss), exit_())
    return b.assemble()


def test_array_python_writes_program_reads():
    with Map.create(MapType.ARRAY, 4, 8, 4, name="arr") as m:
        m[2] = 0x1234_5678_9ABC
        assert m.lookup_int(2) == 0x1234_5678_9ABC
        insns = link(lookup_then(2, [ldx(4, R0, R0, 0), exit_()]), {"m": m})
        with Program.load(ProgType.XDP, insns) as p:
            assert p.test_run(ether()).retval == 0x5678_9ABC
            m.update(2, (7).to_bytes(8, "little"))
            assert p.test_run(ether()).retval == 7


def test_array_program_writes_python_reads():
    with Map.create(MapType.ARRAY, 4, 8, 4, name="arr") as m:
        body = [ld_imm64(R1, 0x1122_3344_5566_7788), stx(8, R0, 0, R1), mov(R0, 2), exit_()]
        with Program.load(ProgType.XDP, link(lookup_then(3, body), {"m": m})) as p:
            assert m.lookup_int(3) == 0
            assert p.test_run(ether()).retval == 2
        assert m[3] == (0x1122_3344_5566_7788).to_bytes(8, "little")
        assert list(m.keys()) == [i.to_bytes(4, "little") for i in range(4)]
        with pytest.raises(BPFError) as ei:
            m.delete(0)  # array elements cannot be deleted
        assert ei.value.errno == errno.EINVAL
        assert m.lookup(4) is None  # out of range


def test_hash_both_directions_and_iteration():
    with Map.create(MapType.HASH, 8, 4, 16, name="h") as m:
        # the program inserts {key 99: value 5}
        b = Builder()
        b.emit(st(8, FP, -8, 99), st(4, FP, -12, 5), ld_map_fd(R1, "m"), mov(R2, FP), alu(Alu.ADD, R2, -8),
               mov(R3, FP), alu(Alu.ADD, R3, -12), mov(R4, 0), call_helper(UPDATE), exit_())
        with Program.load(ProgType.XDP, link(b.assemble(), {"m": m})) as p:
            assert p.test_run(ether()).retval == 0
        assert m.lookup_int(99) == 5
        # Python inserts, the program reads key 7
        m[7] = 41
        with Program.load(ProgType.XDP, link(lookup_then(7, [ldx(4, R0, R0, 0), exit_()], key_size=8), {"m": m})) as p:
            assert p.test_run(ether()).retval == 41
            del m[7]
            assert p.test_run(ether()).retval == 0
        for k in (1, 2, 3):
            m[k] = k * 10
        assert sorted(int.from_bytes(k, "little") for k in m.keys()) == [1, 2, 3, 99]
        assert dict(m.items())[(2).to_bytes(8, "little")] == (20).to_bytes(4, "little")
        assert 3 in m and 4 not in m
        with pytest.raises(KeyError):
            m.delete(4)
        with pytest.raises(KeyError):
            m[4]
        with pytest.raises(BPFError) as ei:
            m.update(3, 1, UpdateFlags.NOEXIST)
        assert ei.value.errno == errno.EEXIST
        with pytest.raises(ValueError):
            m.lookup(b"\0" * 4)  # wrong key size


def test_hash_full():
    with Map.create(MapType.HASH, 4, 4, 2, name="small") as m:
        m[1], m[2] = 1, 2
        with pytest.raises(BPFError) as ei:
            m[3] = 3
        assert ei.value.errno == errno.E2BIG


def test_percpu_array():
    ncpu = possible_cpus()
    assert ncpu >= 1
    with Map.create(MapType.PERCPU_ARRAY, 4, 4, 1, name="pc") as m:
        assert m.user_value_size == 8 * ncpu  # 4-byte values, 8-byte slots
        # each run adds 1 to the slot of the CPU it ran on
        body = [ldx(4, R1, R0, 0), alu(Alu.ADD, R1, 1), stx(4, R0, 0, R1), mov(R0, 2), exit_()]
        with Program.load(ProgType.XDP, link(lookup_then(0, body), {"m": m})) as p:
            p.test_run(ether(), repeat=50)
        vals = [int.from_bytes(v, "little") for v in m.lookup_percpu(0)]
        assert len(vals) == ncpu and sum(vals) == 50
        # Python sets a distinct value per CPU; the program returns the one of its CPU
        m.update(0, b"".join(struct.pack("<Q", 100 + i) for i in range(ncpu)))
        assert [int.from_bytes(v, "little") for v in m.lookup_percpu(0)] == [100 + i for i in range(ncpu)]
        with Program.load(ProgType.XDP, link(lookup_then(0, [ldx(4, R0, R0, 0), exit_()]), {"m": m})) as p:
            assert p.test_run(ether()).retval in range(100, 100 + ncpu)
        m.update(0, 9)  # an int is written to every CPU
        assert {int.from_bytes(v, "little") for v in m.lookup_percpu(0)} == {9}


def test_prog_array_tail_call():
    with Map.create(MapType.PROG_ARRAY, 4, 4, 4, name="jmp") as table:
        with Program.load(ProgType.XDP, [mov(R0, 42), exit_()], name="callee") as callee:
            # tail-call table[1]; falls through (returns 7) when the slot is empty
            caller_insns = link([mov(R2, 0), ld_map_fd(R2, "t"), mov(R3, 1), call_helper(TAIL_CALL),
                                 mov(R0, 7), exit_()], {"t": table})
            with Program.load(ProgType.XDP, caller_insns, name="caller") as caller:
                assert caller.test_run(ether()).retval == 7
                table.set_prog(1, callee)
                assert caller.test_run(ether()).retval == 42
                table.delete(1)
                assert caller.test_run(ether()).retval == 7


def test_rodata_global_data_frozen():
    data = struct.pack("<II", 11, 22)
    with Map.global_data(".rodata", data, readonly=True) as ro:
        assert ro.flags & MapFlags.RDONLY_PROG
        assert ro[0] == data
        with pytest.raises(BPFError) as ei:
            ro[0] = data  # frozen: userspace writes are refused
        assert ei.value.errno == errno.EPERM
        insns = link([ld_map_value(R1, "ro", 4), ldx(4, R0, R1, 0), exit_()], {"ro": ro})
        with Program.load(ProgType.XDP, insns) as p:
            assert p.test_run(ether()).retval == 22
        bad = link([ld_map_value(R1, "ro", 0), st(4, R1, 0, 1), mov(R0, 0), exit_()], {"ro": ro})
        with pytest.raises(VerifierError) as ve:
            Program.load(ProgType.XDP, bad)
        assert "write into map forbidden" in ve.value.reason


def test_from_spec_and_info():
    spec = MapSpec(name=".data", type=MapType.ARRAY, key_size=4, value_size=16, max_entries=1,
                   contents=b"abc", section=".data")
    with Map.from_spec(spec) as m:
        assert m[0] == b"abc".ljust(16, b"\0")
        info = m.info()
        assert info.type == MapType.ARRAY and info.value_size == 16 and info.max_entries == 1
        assert info.name == b".data" and info.id > 0
        m[0] = b"x" * 16  # not frozen
    assert m.closed
