"""Handlers on real traffic: a veth pair between two namespaces the test creates (and deletes), the handler
attached to one end (XDP native and generic, tc), a known mix of frames sent from the other. The guest's
counts and output must equal what was sent, a drop rule must really drop (a socket on the receiving side
never sees those datagrams), two CPUs at once must lose no atomic update and leave the heap whole, and
nothing may be left behind: link, program, map, fd, namespace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from capsule.compiler import hook_abi as h
from capsule.hooks import heap as guest_heap
from capsule.hooks import packets as P
from capsule.hooks.attach import Attachment
from capsule.hooks.build import hook_object
from capsule.hooks.netns import A_IP4, A_IP6, B_IP4, B_IP6, Receiver, VethPair, namespaces
from capsule.hooks.program import HookProgram
from capsule.kernel.consts import Cmd
from capsule.kernel.sys import get_fd_by_id

from .conftest import PROGRAMS

pytestmark = pytest.mark.requires_bpf

KINDS = ("udp4", "drop4", "syn4", "ping4", "udp6", "short", "jumbo")


@pytest.fixture(scope="module")
def mix():
    return {kind: hook_object(kind, [PROGRAMS / "mix.c"]) for kind in ("xdp", "tc")}


def _mix(v: VethPair, jumbo: bool) -> tuple[list[bytes], dict[str, int], list[str]]:
    """The frames of the mix, how many of each kind, and the lines the handler prints for them (in order)."""
    macs = (v.mac_a, v.mac_b)

    def v4(proto: int, l4: bytes) -> bytes:
        return P.ether(*macs, P.ETH_IP4, P.ipv4(B_IP4, A_IP4, proto, l4))

    kinds = [
        ("udp4", v4(P.UDP, P.udp(B_IP4, A_IP4, 4000, 5000, b"to the receiver"))),
        ("drop4", v4(P.UDP, P.udp(B_IP4, A_IP4, 4000, 9999, b"never seen"))),
        ("syn4", v4(P.TCP, P.tcp(B_IP4, A_IP4, 4000, 80, options=P.tcp_options()))),
        ("ping4", v4(P.ICMP, P.icmp_echo())),
        ("udp6", P.ether(*macs, P.ETH_IP6, P.ipv6(B_IP6, A_IP6, P.UDP, P.udp(B_IP6, A_IP6, 4000, 5000, b"v6")))),
        ("short", P.ether(*macs, 0x88B5, b"short")),
    ]
    frames, counts, lines = [], dict.fromkeys(KINDS, 0), []
    for rep in range(5):
        for k, (kind, f) in enumerate(kinds):
            if kind == "drop4" and rep % 2:
                continue
            frames.append(f)
            counts[kind] += 1
            lines.append(f"{kind} {len(f)}")
            if k == 0 and jumbo and rep == 2:
                big = v4(P.UDP, P.udp(B_IP4, A_IP4, 4000, 5000, bytes(8900)))
                frames.append(big)
                counts["jumbo"] += 1
                lines.append(f"jumbo {len(big)}")
    return frames, counts, lines


def _attached_ids(att: Attachment) -> tuple[int, int]:
    assert att.link is not None
    return att.link.info().id, att.program.prog.info().id


def _gone(kind: Cmd, ident: int) -> bool:
    try:
        get_fd_by_id(kind, ident).close()
    except OSError:
        return True
    return False


@pytest.mark.parametrize("hook,mode", [("xdp", "native"), ("xdp", "generic"), ("tc", None)])
def test_a_known_mix_is_counted_printed_and_dropped(mix, hook, mode, no_kernel_fd_leak):
    with VethPair(mtu=9000) as v:
        frames, counts, lines = _mix(v, jumbo=True)
        prog = HookProgram(mix[hook], snaplen=256)
        with prog, Receiver(v, 5000) as rx, Receiver(v, 9999) as rx_drop, Receiver(v, 5000, v6=True) as rx6:
            with Attachment(prog, v.dev_a, netns=v.ns_a, mode=mode) as att:
                link_id, prog_id = _attached_ids(att)
                assert v.send(frames, cpu=0) == len(frames)
                delivered = rx.drain(counts["udp4"] + counts["jumbo"])
                delivered6 = rx6.drain(counts["udp6"])
                assert rx_drop.drain(timeout=0.5) == []  # the drop rule really drops
                att.poll(0.3)
                st = att.stats()
            assert sorted(len(d) for d in delivered) == sorted([15] * counts["udp4"] + [8900] * counts["jumbo"])
            assert delivered6 == [b"v6"] * counts["udp6"]
            assert {k: prog.read_bytes("counts")[8 * i : 8 * i + 8] for i, k in enumerate(KINDS)} == \
                {k: counts[k].to_bytes(8, "little") for k in KINDS}
            assert [s for _, _, s in att.lines if s.split()[0] in KINDS] == lines
            assert st.dropped >= counts["drop4"] and st.defaulted == 0 and st.ring_drops == 0
            assert st.run_cnt >= len(frames) and st.ns_per_packet > 0  # bpf_stats while attached
        # detached and released: the link and the program no longer exist
        assert _gone(Cmd.LINK_GET_FD_BY_ID, link_id) and _gone(Cmd.PROG_GET_FD_BY_ID, prog_id)
        shown = subprocess.run(["ip", "-n", v.ns_a, "-d", "link", "show", "dev", v.dev_a], capture_output=True,
                               text=True, check=True).stdout
        assert "prog/xdp" not in shown


def test_two_cpus_at_once_lose_no_atomic_update_and_keep_the_heap_whole(no_kernel_fd_leak):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")  # the project's machines have two
    with VethPair(queues=2) as veth:
        _two_cpus(veth)
    assert not {veth.ns_a, veth.ns_b} & namespaces()


def _two_cpus(veth: VethPair) -> None:
    spec = hook_object("xdp", [PROGRAMS / "concurrent.c"])
    per_cpu = 20000
    rng_frames = []
    for k in range(per_cpu):
        payload = bytes([(k * 7) & 0xFF, (k * 13) & 0xFF, k & 0xFF]) + b"x" * 20
        rng_frames.append(P.ether(veth.mac_a, veth.mac_b, 0x88B5, payload))
    with HookProgram(spec, heap=8 << 20) as prog:
        with Attachment(prog, veth.dev_a, netns=veth.ns_a, mode="native") as att:
            sent = veth.send_parallel([(0, rng_frames), (1, rng_frames)])
            att.poll(0.5)
            st = att.stats()
        assert sent == [per_cpu, per_cpu]
        assert prog.read("total") == 2 * per_cpu == st.packets - prog.read("others")  # not one update lost
        by_cpu = prog.read_bytes("by_cpu")
        assert [int.from_bytes(by_cpu[8 * c : 8 * c + 8], "little") for c in (0, 1)] == [per_cpu, per_cpu]
        assert all(f["packets"] >= per_cpu for f in st.per_fiber[:2])
        assert prog.read("unlocked") <= 2 * per_cpu  # a plain ++ may lose updates (counted, not asserted)
        assert prog.read("peak") == 2 and prog.read("inflight") == 0  # both CPUs were in a handler at once
        assert prog.read("failed") == 0 and st.defaulted == 0 and st.lock_breaks == 0
        heap_at = prog.call(h.HEAP_EXPORT)[0] & 0xFFFF_FFFF
        mem = prog.inst.mem
        report = guest_heap.check(lambda a, n: bytes(mem[a : a + n]), heap_at)
        assert not report.broken
        assert report.allocs - report.frees == report.used >= 1  # the blocks still in the slots
        assert report.allocs >= 2 * per_cpu


def test_no_pins_are_made():
    pins = Path("/sys/fs/bpf")
    if pins.is_dir():
        assert not [p for p in pins.rglob("*") if "capsule" in p.name]


@pytest.mark.parametrize("mode,kind,where", [(1, "budget", "on_packet"), (2, "budget", "recurse"),
                                             (3, "trap", "divide"), (4, "trap", "wild")])
def test_a_fault_on_live_traffic_gets_the_default_verdict_and_the_next_packet_runs(veth, faults_xdp, mode, kind,
                                                                                     where):
    """Faults with real packets: every faulting packet is let through (the default verdict: the receiver gets
    it), reported with its guest backtrace, and the packets after it are handled normally."""
    def udp(k: int) -> bytes:
        return P.ether(veth.mac_a, veth.mac_b, P.ETH_IP4,
                       P.ipv4(B_IP4, A_IP4, P.UDP, P.udp(B_IP4, A_IP4, 4000, 5000, b"%03d" % k)))

    with HookProgram(faults_xdp, budget=200_000) as prog, Receiver(veth, 5000) as rx:
        with Attachment(prog, veth.dev_a, netns=veth.ns_a, mode="native") as att:
            prog.write("mode", mode)
            assert veth.send([udp(k) for k in range(5)], cpu=0) == 5
            got_faulty = rx.drain(5)
            prog.write("mode", 0)
            assert veth.send([udp(k) for k in range(5, 10)], cpu=0) == 5
            got_after = rx.drain(5)
            att.poll(0.3)
            st = att.stats()
        assert got_faulty == [b"%03d" % k for k in range(5)]  # the default verdict, PASS, let them through
        assert got_after == [b"%03d" % k for k in range(5, 10)]
        faults = [e for e in att.events if e.kind == kind]
        assert len(faults) >= 5 and all(e.backtrace[0] == where for e in faults)  # and the chatter's
        handled = [s for _, _, s in att.lines if s.startswith("packet ")]
        assert len(handled) >= 5  # the five after the faults (and perhaps the namespace's own chatter)
        assert st.defaulted == len(faults) == {"budget": st.budget, "trap": st.traps}[kind]
