"""Inputs for running a program and its optimised version side by side with BPF_PROG_TEST_RUN.

Packets (XDP, TC, socket filters, cgroup skb): valid Ethernet frames carrying IPv4 and IPv6 with TCP, UDP and
ICMP (low and high ports, IP options, a fragment, a VLAN tag, ARP), truncated headers, and random bytes drawn
both uniformly and from an alphabet of protocol-ish byte values so that field comparisons in the program
take both ways; the valid frames also come wrapped in a second Ethernet header, for socket filters whose
``ld_abs`` offsets start after the header the kernel pulled. Context buffers (SYSCALL): zeros, counting
bytes, text, and random contents whose 32-bit words
are kept small, so that loops bounded by a context field finish quickly and deterministically.
Everything is derived from a fixed seed: both sides of a comparison see the same bytes.
"""

from __future__ import annotations

import random
import struct

__all__ = ["packets", "context_buffers", "map_seed_entries"]

_MAC = bytes.fromhex("020000000001") + bytes.fromhex("020000000002")


def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s: int = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _ipv4(proto: int, payload: bytes, *, ihl: int = 5, frag: int = 0, tos: int = 0, ttl: int = 64) -> bytes:
    opts = b"\x01" * ((ihl - 5) * 4)
    total = 4 * ihl + len(payload)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos, total, 0x1234, frag, ttl, proto, 0,
                      bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + opts
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    return hdr + payload


def _ipv6(nh: int, payload: bytes) -> bytes:
    src = bytes.fromhex("fd000000000000000000000000000001")
    dst = bytes.fromhex("fd000000000000000000000000000002")
    return struct.pack("!IHBB", 0x60000000, len(payload), nh, 64) + src + dst + payload


def _tcp(sport: int, dport: int, flags: int = 0x02, data: bytes = b"") -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 8192, 0, 0) + data


def _udp(sport: int, dport: int, data: bytes = b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def _icmp(t: int = 8) -> bytes:
    return struct.pack("!BBHHH", t, 0, 0, 1, 1) + b"ping" * 8


def _eth(ethertype: int, payload: bytes) -> bytes:
    return _MAC + struct.pack("!H", ethertype) + payload


def packets(seed: int = 1) -> list[bytes]:
    """A fixed, varied list of packets (every one at least 14 bytes, as test runs require)."""
    rnd = random.Random(seed)
    out = [
        _eth(0x0800, _ipv4(6, _tcp(40000, 80, data=b"GET / HTTP/1.0\r\n\r\n"))),
        _eth(0x0800, _ipv4(6, _tcp(22, 51000, flags=0x12))),
        _eth(0x0800, _ipv4(17, _udp(5353, 53, b"\x12\x34" + bytes(30)))),
        _eth(0x0800, _ipv4(17, _udp(40001, 4789, bytes(range(64))))),
        _eth(0x0800, _ipv4(1, _icmp(), tos=0xB8)),
        _eth(0x0800, _ipv4(6, _tcp(1234, 443), ihl=6, tos=0x28)),
        _eth(0x0800, _ipv4(17, _udp(1, 2), frag=0x2001, ttl=1)),
        _eth(0x86DD, _ipv6(6, _tcp(33000, 8080))),
        _eth(0x86DD, _ipv6(17, _udp(546, 547, b"dhcp6"))),
        _eth(0x86DD, _ipv6(58, _icmp(128))),
        _eth(0x8100, struct.pack("!HH", 100, 0x0800) + _ipv4(17, _udp(9, 9))),
        _eth(0x0806, bytes.fromhex("0001080006040001") + _MAC[:6] + bytes(4) + _MAC[6:] + bytes(4)),
        _eth(0x0800, b""),  # Ethernet header only
        _eth(0x0800, _ipv4(6, b"")[:12]),  # truncated IPv4 header
        _eth(0x86DD, _ipv6(6, b"")[:20]),  # truncated IPv6 header
        bytes(14),
        bytes([0xFF]) * 64,
    ]
    # socket filters (and skb programs using ld_abs) see the packet after the kernel pulled the Ethernet
    # header; a frame carried inside another Ethernet header gives them a well-formed one to parse
    out += [_eth(0x0800, f) for f in out[:11]]
    alphabet = [0, 1, 2, 4, 6, 8, 17, 0x11, 0x45, 0x5A, 0x60, 0x7F, 0x80, 0x86, 0xDD, 0xFF]
    for n in (16, 40, 60, 128, 300):
        out.append(bytes(rnd.choice(alphabet) for _ in range(n)))
    for n in (15, 64, 200, 1000):
        out.append(rnd.randbytes(n))
    return out


def context_buffers(size: int, seed: int = 2) -> list[bytes]:
    """Context buffers of ``size`` bytes with varied, loop-friendly contents."""
    rnd = random.Random(seed)
    text = b"hello, world 42; bpf.capsule 7 \t 0x1f ABC def\n" * (size // 46 + 1)

    def small_words(limit: int) -> bytes:
        return b"".join(struct.pack("<I", rnd.randrange(limit)) for _ in range((size + 3) // 4))[:size]

    return [
        bytes(size),
        bytes((i + 1) & 0xFF for i in range(size)),
        text[:size],
        small_words(8),
        small_words(300),
        small_words(70000),
    ]


def map_seed_entries(name: str, key_size: int, value_size: int, count: int) -> list[tuple[bytes, bytes]]:
    """Deterministic (key, value) pairs to put in a map before a run (keys 0..count-1, little endian)."""
    rnd = random.Random(f"{name}/{key_size}/{value_size}")
    out = []
    for k in range(count):
        key = k.to_bytes(8, "little")[:key_size].ljust(key_size, b"\0")
        out.append((key, bytes(rnd.randrange(4) for _ in range(value_size))))
    return out
