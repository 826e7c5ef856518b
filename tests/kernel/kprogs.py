"""Small helpers for the kernel tests: resolve map/kfunc refs in hand-written programs, build packets, pull a
relocation-free program's bytes out of a clang object."""

from __future__ import annotations

import struct
from pathlib import Path

from elftools.elf.elffile import ELFFile

from capsule.bpf.insn import Insn
from capsule.bpf.spec import ProgramSpec
from capsule.kernel.collection import resolve_refs
from capsule.kernel.maps import Map


def link(insns: list[Insn], maps: dict[str, Map] | None = None) -> list[Insn]:
    """Fill in what a loader would (map fds, map values, kfunc ids): the loader's own ``resolve_refs``."""
    return resolve_refs(ProgramSpec("test", "test", 0, insns), dict(maps or {}))


def ether(payload: bytes = b"", *, ethertype: int = 0x0800, dst: bytes = b"\xff" * 6,
          src: bytes = b"\x02\0\0\0\0\x01") -> bytes:
    """An Ethernet frame, padded to the 60-byte minimum."""
    return (dst + src + struct.pack("!H", ethertype) + payload).ljust(60, b"\0")


def ipv4_udp(dport: int, payload: bytes = b"x" * 8, proto: int = 17) -> bytes:
    """An IPv4 header (no checksum) + UDP header with the given destination port, + payload."""
    udp = struct.pack("!HHHH", 1234, dport, 8 + len(payload), 0) + payload
    src, dst = b"\x0a\0\0\1", b"\x0a\0\0\2"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, proto, 0, src, dst)
    return ip + udp


def section_bytes(obj: Path, section: str) -> bytes:
    """The raw instructions of one program section; refuses sections with relocations (they need a loader)."""
    with obj.open("rb") as f:
        elf = ELFFile(f)
        if elf.get_section_by_name(".rel" + section) is not None:
            raise ValueError(f"{section} has relocations")
        sec = elf.get_section_by_name(section)
        if sec is None:
            raise KeyError(section)
        return sec.data()


def u32(b: bytes, off: int = 0) -> int:
    return struct.unpack_from("<I", b, off)[0]


def u64(b: bytes, off: int = 0) -> int:
    return struct.unpack_from("<Q", b, off)[0]
