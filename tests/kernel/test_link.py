"""XDP links on a veth pair inside network namespaces of our own (never any other interface)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
import uuid

import pytest
from kprogs import ether, link

from capsule.bpf.asm import FP, R0, R1, R2, R3, Builder, alu, atomic, call_helper, exit_, jmp, ld_map_fd, ldx, mov, st
from capsule.bpf.opcodes import Alu, Atomic, Jmp
from capsule.kernel import Link, Map, MapType, Program, ProgType, XDPAction, XDPFlags, run_in_netns
from capsule.kernel.consts import Helper, LinkType

pytestmark = pytest.mark.requires_bpf

ETH_P_TEST = 0x88B5  # IEEE local experimental EtherType


def ip(*args: str, check: bool = True) -> str:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True).stdout


@pytest.fixture
def veth():
    """Two fresh namespaces joined by a veth pair: (ns_a, "va" in ns_a, ns_b, "vb" in ns_b). Deleted after."""
    tag = uuid.uuid4().hex[:8]
    ns_a, ns_b = f"capsule-{tag}-a", f"capsule-{tag}-b"
    ip("netns", "add", ns_a)
    try:
        ip("netns", "add", ns_b)
        try:
            ip("link", "add", "va", "netns", ns_a, "type", "veth", "peer", "name", "vb", "netns", ns_b)
            ip("-n", ns_a, "link", "set", "va", "up")
            ip("-n", ns_b, "link", "set", "vb", "up")
            yield ns_a, "va", ns_b, "vb"
        finally:
            ip("netns", "del", ns_b, check=False)
    finally:
        ip("netns", "del", ns_a, check=False)


def counting_program(counter: Map) -> Program:
    """XDP: count frames of EtherType ETH_P_TEST in counter[0] and drop them; pass everything else."""
    b = Builder()
    b.emit(ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), mov(R1, R2), alu(Alu.ADD, R1, 14), jmp(Jmp.JGT, R1, R3, "pass"))
    b.emit(ldx(2, R1, R2, 12), jmp(Jmp.JNE, R1, socket.htons(ETH_P_TEST), "pass"))
    b.emit(st(4, FP, -4, 0), ld_map_fd(R1, "c"), mov(R2, FP), alu(Alu.ADD, R2, -4),
           call_helper(int(Helper.MAP_LOOKUP_ELEM)), jmp(Jmp.JEQ, R0, 0, "pass"))
    b.emit(mov(R1, 1), atomic(Atomic.ADD, 8, R0, 0, R1), mov(R0, int(XDPAction.DROP)), exit_())
    b.label("pass")
    b.emit(mov(R0, int(XDPAction.PASS)), exit_())
    return Program.load(ProgType.XDP, link(b.assemble(), {"c": counter}), name="xdp_count")


def send_frames(ns: str, ifname: str, n: int) -> None:
    frame = ether(b"capsule test frame", ethertype=ETH_P_TEST, src=b"\x02\0\0\0\0\x02")

    def body() -> None:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((ifname, 0))
            for _ in range(n):
                s.send(frame)

    run_in_netns(f"/run/netns/{ns}", body)


def wait_count(counter: Map, want: int, timeout: float = 3.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = counter.lookup_int(0)
        if got >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


@pytest.mark.parametrize("mode,word", [(XDPFlags.DRV_MODE, " xdp "), (XDPFlags.SKB_MODE, " xdpgeneric ")])
def test_xdp_link_attach_receive_detach(veth, mode, word):
    ns_a, va, ns_b, vb = veth
    with Map.create(MapType.ARRAY, 4, 8, 1, name="count") as counter, counting_program(counter) as prog:
        ifindex = run_in_netns(f"/run/netns/{ns_a}", lambda: socket.if_nametoindex(va))
        lk = run_in_netns(f"/run/netns/{ns_a}", lambda: Link.xdp(prog, ifindex, mode))
        try:
            info = lk.info()
            assert info.type == LinkType.XDP and info.prog_id == prog.info().id
            assert lk.ifindex() == ifindex
            shown = ip("-n", ns_a, "-d", "link", "show", "dev", va)
            assert word in shown.splitlines()[0]  # native or generic mode, as asked
            assert f"prog/xdp id {prog.info().id}" in shown
            send_frames(ns_b, vb, 5)
            assert wait_count(counter, 5) == 5
            lk.detach()
            assert "prog/xdp" not in ip("-n", ns_a, "-d", "link", "show", "dev", va)
            assert lk.ifindex() == 0
            send_frames(ns_b, vb, 3)
            time.sleep(0.1)
            assert counter.lookup_int(0) == 5  # detached: no more counting
        finally:
            lk.close()


def test_closing_the_link_detaches(veth):
    ns_a, va, _, _ = veth
    with Map.create(MapType.ARRAY, 4, 8, 1, name="count") as counter, counting_program(counter) as prog:
        ifindex = run_in_netns(f"/run/netns/{ns_a}", lambda: socket.if_nametoindex(va))
        lk = run_in_netns(f"/run/netns/{ns_a}", lambda: Link.xdp(prog, ifindex, XDPFlags.SKB_MODE))
        with lk:
            assert f"prog/xdp id {prog.info().id}" in ip("-n", ns_a, "-d", "link", "show", "dev", va)
        assert lk.closed
        assert "prog/xdp" not in ip("-n", ns_a, "-d", "link", "show", "dev", va)


def test_second_attach_is_refused(veth):
    ns_a, va, _, _ = veth
    with Map.create(MapType.ARRAY, 4, 8, 1, name="count") as counter, counting_program(counter) as prog:
        ifindex = run_in_netns(f"/run/netns/{ns_a}", lambda: socket.if_nametoindex(va))
        with run_in_netns(f"/run/netns/{ns_a}", lambda: Link.xdp(prog, ifindex, XDPFlags.SKB_MODE)):
            with pytest.raises(OSError) as ei:
                run_in_netns(f"/run/netns/{ns_a}", lambda: Link.xdp(prog, ifindex, XDPFlags.SKB_MODE))
            assert ei.value.errno == 16  # EBUSY
            assert "LINK_CREATE" in str(ei.value)


def test_run_in_netns_isolates_the_thread(veth):
    ns_a, va, _, _ = veth
    names = run_in_netns(f"/run/netns/{ns_a}", lambda: sorted(n for _, n in socket.if_nameindex()))
    assert names == ["lo", va]
    assert va not in [n for _, n in socket.if_nameindex()]  # this thread never moved
    with pytest.raises(FileNotFoundError):
        run_in_netns("/run/netns/does-not-exist-" + os.urandom(4).hex(), lambda: None)
    with pytest.raises(ZeroDivisionError):
        run_in_netns(f"/run/netns/{ns_a}", lambda: 1 // 0)


def test_program_drops_test_frames_in_test_run():
    with Map.create(MapType.ARRAY, 4, 8, 1, name="count") as counter, counting_program(counter) as prog:
        assert prog.test_run(ether(ethertype=ETH_P_TEST)).retval == XDPAction.DROP
        assert prog.test_run(ether()).retval == XDPAction.PASS
        assert struct.unpack("<Q", counter[0])[0] == 1
