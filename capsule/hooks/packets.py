"""Frames to feed hooks with: Ethernet, IPv4/IPv6, TCP/UDP/ICMP with correct checksums (the receiving
stack drops anything else before a socket sees it), and random frames, well-formed or not, for differential
tests."""

from __future__ import annotations

import random
import socket
import struct

ETH_IP4, ETH_IP6, ETH_ARP = 0x0800, 0x86DD, 0x0806
TCP, UDP, ICMP, ICMP6 = 6, 17, 1, 58
SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ether(dst: bytes, src: bytes, ethertype: int, payload: bytes) -> bytes:
    return dst + src + struct.pack("!H", ethertype) + payload


def ipv4(src: str, dst: str, proto: int, payload: bytes, *, ttl: int = 64, ident: int = 1,
         options: bytes = b"") -> bytes:
    ihl = 5 + len(options) // 4
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(payload), ident, 0, ttl, proto, 0,
                      socket.inet_aton(src), socket.inet_aton(dst)) + options
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:] + payload


def ipv6(src: str, dst: str, next_header: int, payload: bytes, *, hop_limit: int = 64) -> bytes:
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), next_header, hop_limit,
                       socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)) + payload


def _pseudo(src: str, dst: str, proto: int, length: int) -> bytes:
    if ":" in src:
        return (socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
                + struct.pack("!IxxxB", length, proto))
    return socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!xBH", proto, length)


def udp(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    c = checksum(_pseudo(src, dst, UDP, len(seg)) + seg) or 0xFFFF
    return seg[:6] + struct.pack("!H", c) + seg[8:]


def tcp(src: str, dst: str, sport: int, dport: int, *, flags: int = SYN, seq: int = 1, ack: int = 0,
        options: bytes = b"", payload: bytes = b"", window: int = 65535) -> bytes:
    options += b"\0" * (-len(options) % 4)
    off = 5 + len(options) // 4
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, window, 0, 0) + options + payload
    c = checksum(_pseudo(src, dst, TCP, len(seg)) + seg)
    return seg[:16] + struct.pack("!H", c) + seg[18:]


def icmp_echo(ident: int = 1, seq: int = 1, payload: bytes = b"capsule") -> bytes:
    msg = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + payload
    return msg[:2] + struct.pack("!H", checksum(msg)) + msg[4:]


def tcp_options(*, mss: int | None = 1460, wscale: int | None = 7, sack: bool = True,
                timestamps: tuple[int, int] | None = (1, 0), nops: int = 0) -> bytes:
    out = b"\x01" * nops
    if mss is not None:
        out += struct.pack("!BBH", 2, 4, mss)
    if sack:
        out += b"\x04\x02"
    if timestamps is not None:
        out += struct.pack("!BBII", 8, 10, *timestamps)
    if wscale is not None:
        out += b"\x01" + struct.pack("!BBB", 3, 3, wscale)
    return out


def random_frame(rng: random.Random, macs: tuple[bytes, bytes] = (b"\x02" * 6, b"\x04" * 6)) -> bytes:
    """A frame that is well formed more often than not: the kinds a parser must get right, and damaged
    copies of them (truncated, a wrong length field, random bytes)."""
    a4, b4 = (f"10.{rng.randrange(4)}.0.{rng.randrange(1, 5)}" for _ in range(2))
    a6, b6 = (f"fd00::{rng.randrange(1, 5)}" for _ in range(2))
    sport, dport = (rng.choice((53, 80, 443, 9999, rng.randrange(1024, 65536))) for _ in range(2))
    body = rng.randbytes(rng.randrange(0, 64))
    kind = rng.randrange(9)
    if kind == 0:
        l3 = ipv4(a4, b4, UDP, udp(a4, b4, sport, dport, body))
    elif kind == 1:
        opts = tcp_options(mss=rng.choice((None, 1460)), wscale=rng.choice((None, 7)), sack=rng.random() < .5,
                           timestamps=rng.choice((None, (rng.randrange(1 << 32), 0))), nops=rng.randrange(4))
        l3 = ipv4(a4, b4, TCP, tcp(a4, b4, sport, dport, flags=rng.choice((SYN, SYN | ACK, ACK, FIN | ACK, RST)),
                                 seq=rng.randrange(1 << 32), options=opts, payload=body))
    elif kind == 2:
        l3 = ipv4(a4, b4, ICMP, icmp_echo(rng.randrange(65536), rng.randrange(65536), body))
    elif kind == 3:
        l3 = ipv6(a6, b6, UDP, udp(a6, b6, sport, dport, body))
    elif kind == 4:
        l3 = ipv6(a6, b6, TCP, tcp(a6, b6, sport, dport, flags=SYN, options=tcp_options(nops=rng.randrange(3))))
    elif kind == 5:  # IPv6 with extension headers before the transport
        inner = udp(a6, b6, sport, dport, body)
        hop = bytes([UDP, 0]) + bytes(6)  # hop-by-hop, 8 bytes, next: UDP
        l3 = ipv6(a6, b6, 0, hop + inner)
    elif kind == 6:
        l3 = ipv4(a4, b4, UDP, udp(a4, b4, sport, dport, body), options=b"\x01\x01\x01\x00")  # IHL 6
    elif kind == 7:
        return ether(*macs, ETH_ARP, rng.randbytes(28))
    else:
        return rng.randbytes(rng.randrange(0, 80))
    frame = ether(*macs, ETH_IP6 if kind in (3, 4, 5) else ETH_IP4, l3)
    damage = rng.randrange(6)
    if damage == 0:
        frame = frame[: rng.randrange(len(frame))]
    elif damage == 1 and len(frame) > 20:
        i = rng.randrange(14, len(frame))
        frame = frame[:i] + bytes([rng.randrange(256)]) + frame[i + 1:]
    return frame
