"""The main job: build the bundled XDP program with clang-19, load it with capsule's own loader, run it on
packets with BPF_PROG_TEST_RUN, and show what the verifier and the program did.

Every packet's verdict is also computed by a few lines of Python reading the same headers, and the two are
compared: the demo fails (exit status 1) if the kernel and the reference disagree.
"""

from __future__ import annotations

import struct
import tempfile
import time
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capsule.bpf.uapi import XDPAction

BLOCKED_PORT = 9999
XDP: dict[int, str] = {a: f"XDP_{a.name}" for a in (XDPAction.DROP, XDPAction.PASS)}
PROTO = {1: "icmp", 6: "tcp", 17: "udp"}


def _ipv4(proto: int, payload: bytes) -> bytes:
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    total = 20 + len(payload)
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, total, 1, 0, 64, proto, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    )
    return eth + ip + payload


def _udp(dport: int, body: bytes) -> bytes:
    return _ipv4(17, struct.pack("!HHHH", 40000, dport, 8 + len(body), 0) + body)


def sample_packets() -> list[tuple[str, bytes]]:
    tcp = struct.pack("!HHIIBBHHH", 40000, 80, 1, 0, 0x50, 0x02, 65535, 0, 0)
    arp = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x06" + bytes(28)
    return [
        ("udp to port 53", _udp(53, b"query")),
        (f"udp to port {BLOCKED_PORT}", _udp(BLOCKED_PORT, b"blocked")),
        ("tcp syn to port 80", _ipv4(6, tcp)),
        ("icmp echo", _ipv4(1, b"\x08\x00\x00\x00\x00\x01\x00\x01" + bytes(32))),
        ("arp (not ipv4)", arp),
        ("truncated ipv4", _ipv4(17, b"")[:20]),
    ]


def reference_verdict(pkt: bytes) -> int:
    """What the program should return, computed in Python from the same header fields."""
    if len(pkt) < 14 or pkt[12:14] != b"\x08\x00" or len(pkt) < 34:
        return 2
    if pkt[23] != 17:
        return 2
    off = 14 + (pkt[14] & 0x0F) * 4
    if len(pkt) < off + 8:
        return 2
    return 1 if struct.unpack_from("!H", pkt, off + 2)[0] == BLOCKED_PORT else 2


def run_demo(console: Console) -> int:
    from capsule.bpf.elf import read_object
    from capsule.kernel.collection import Collection
    from capsule.kernel.consts import LogLevel
    from capsule.toolchain.clang import compile_bpf

    src = resources.files("capsule.examples").joinpath("packet_stats.bpf.c")
    with tempfile.TemporaryDirectory(prefix="capsule-demo-") as tmp, resources.as_file(src) as src_path:
        obj = Path(tmp) / "packet_stats.bpf.o"
        t0 = time.perf_counter()
        compile_bpf(Path(src_path), obj)
        t_build = time.perf_counter() - t0
        spec = read_object(obj)
    console.print(
        f"[bold]capsule demo[/bold]: {src_path.name} compiled by clang-19 in {t_build * 1000:.0f} ms; "
        f"{len(spec.programs)} program, {len(spec.maps)} maps "
        f"({', '.join(spec.maps)})",
        highlight=False,
    )

    t0 = time.perf_counter()
    with Collection.load(spec, log_level=LogLevel.BRANCHES | LogLevel.STATS) as coll:
        t_load = time.perf_counter() - t0
        prog = coll.programs["packet_stats"]
        info, st = prog.info(), prog.stats
        assert st is not None  # loaded with LogLevel.STATS
        vt = Table(title="verifier")
        for col in (
            "program insns",
            "processed insns",
            "total states",
            "peak states",
            "verification time",
            "xlated bytes",
            "JITed bytes",
            "load (total)",
        ):
            vt.add_column(col, justify="right")
        vt.add_row(
            str(sum(i.slots() for i in spec.programs["packet_stats"].insns)),
            str(st.processed_insns),
            str(st.total_states),
            str(st.peak_states),
            f"{st.verification_time_usec} us",
            str(info.xlated_prog_len),
            str(info.jited_prog_len),
            f"{t_load * 1000:.1f} ms",
        )
        console.print(vt)

        rt = Table(title="packets (BPF_PROG_TEST_RUN, 1000 repeats each)")
        for col in ("packet", "bytes", "kernel verdict", "reference", "ns/run"):
            rt.add_column(col, justify="left" if col == "packet" else "right")
        failures = 0
        for label, pkt in sample_packets():
            res = prog.test_run(pkt, repeat=1000)
            want = reference_verdict(pkt)
            ok = res.retval == want
            failures += not ok
            mark = "" if ok else " [red]MISMATCH[/red]"
            rt.add_row(
                label,
                str(len(pkt)),
                XDP.get(res.retval, str(res.retval)) + mark,
                XDP[want],
                str(res.duration_ns),
            )
        console.print(rt)

        counts = {
            int.from_bytes(k, "little"): int.from_bytes(v, "little")
            for k, v in coll.maps["proto_count"].items()
            if any(v)
        }
        total = int.from_bytes(coll.maps[".bss"][0][:8], "little")
        checksum = int.from_bytes(coll.maps[".data"][0][:4], "little")
        console.print(
            "map proto_count: " + ", ".join(f"{PROTO.get(k, k)}={v}" for k, v in sorted(counts.items())),
            highlight=False,
        )
        console.print(f"global total_bytes = {total}, last_checksum = 0x{checksum:08x}", highlight=False)
    if failures:
        console.print(
            f"[red]{failures} packet(s) got a different verdict in the kernel than the reference[/red]"
        )
        return 1
    console.print("[green]all verdicts match the reference[/green]")
    return 0
