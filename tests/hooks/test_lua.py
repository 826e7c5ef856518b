"""The Lua observer (Lua 5.4.8 in the kernel, a VM per CPU) on crafted frames run by the hook entry: the packet
object against Python's reading of the same bytes, the two example scripts' output against a model, state kept
across packets, a Lua error reported and the VM going on, a runaway script stopped, and a VM that a packet left
unfinished restored by the host. The observer is loaded once (the verifier takes about a minute over it);
every test loads its own script into it."""

from __future__ import annotations

import os
import random
import struct
from collections import Counter
from collections.abc import Iterator

import pytest

from capsule.bpf.uapi import XDPAction
from capsule.hooks import packets as P
from capsule.hooks.build import lua_observer
from capsule.hooks.lua import BROKEN, READY, LuaVMs, load_script
from capsule.hooks.program import HookProgram

from .conftest import EXAMPLES, Collector

pytestmark = pytest.mark.requires_bpf

SNAPLEN = 128


@pytest.fixture(scope="module")
def observer() -> Iterator[HookProgram]:
    with HookProgram(lua_observer("xdp"), heap=48 << 20, snaplen=SNAPLEN) as prog:
        yield prog


@pytest.fixture
def lua(observer: HookProgram, no_kernel_fd_leak: None) -> Iterator[tuple[HookProgram, Collector]]:
    """The observer with the packet counters as they are, a fresh collector of its ring, settings reset; this
    process kept on one CPU meanwhile: each CPU has its own Lua VM, so test runs that migrate between CPUs
    (a loaded machine) would split a script's state between two VMs."""
    observer.configure(budget=1_000_000, default_verdict="pass")
    col = Collector(observer)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yield observer, col
    finally:
        os.sched_setaffinity(0, cpus)
        col.close()


def _script(prog: HookProgram, text: str) -> LuaVMs:
    return load_script(prog, text)


def _frames(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    return [f for f in (P.random_frame(rng) for _ in range(2 * n)) if len(f) >= 14][:n]


def test_the_packet_object(lua):
    prog, ring = lua
    _script(prog, """
        function on_packet(pkt)
          local a, b = pkt:byte(1, 2)
          -- the last two: nil (in the middle of the list), then no value at all
          print(pkt:len(), #pkt, pkt:captured(), a, b, pkt:byte(-1), #pkt:sub(3, 14), pkt:sub(-2):byte(1),
                #pkt:sub(5, 2), pkt:u8(0), pkt:u16(12), pkt:u32(10), pkt:u16(pkt:captured() - 1), pkt:u8(-1))
          return pkt:u8(0) == 0xff and DROP or PASS
        end""")
    frames = _frames(7, 60) + [b"\xff" * 200]
    verdicts = [prog.run(f)[0] for f in frames]
    want = []
    for f in frames:
        c = f[:SNAPLEN]

        def be(off: int, n: int, c: bytes = c) -> str:
            return str(int.from_bytes(c[off : off + n], "big"))
        want.append("\t".join([str(len(f)), str(len(f)), str(len(c)), str(c[0]), str(c[1]), str(c[-1]),
                               str(len(c[2:14])), str(c[-2]), "0", be(0, 1), be(12, 2), be(10, 4), "nil"]))
    assert ring.drain() == want
    assert verdicts == [XDPAction.PASS] * 60 + [XDPAction.DROP]


def _model_count(frames: list[bytes]) -> str:
    names = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmp6"}
    by, talk = Counter(), Counter()
    for f in frames:
        c = f[:SNAPLEN]
        et = int.from_bytes(c[12:14], "big")
        src = None
        if et == 0x0800 and len(c) >= 34:
            proto, src = names.get(c[23], "ipv4"), ".".join(str(b) for b in c[26:30])
        elif et == 0x86DD and len(c) >= 54:
            proto = names.get(c[20], "ipv6")
            src = ":".join(f"{w:x}" for w in struct.unpack("!8H", c[22:38]))
        elif et == 0x0806:
            proto = "arp"
        else:
            proto = "other"
        by[proto] += 1
        if src:
            talk[src] += 1
    top = sorted(talk.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return (f"{len(frames)} packets: {' '.join(f'{k}={by[k]}' for k in sorted(by))}; "
            f"top: {', '.join(f'{a} {n}' for a, n in top)}")


def test_the_counting_example(lua):
    prog, ring = lua
    _script(prog, (EXAMPLES / "lua_count.lua").read_text() + "\nREPORT_EVERY = 250\n")
    frames = _frames(3, 750)
    assert all(prog.run(f)[0] == XDPAction.PASS for f in frames)
    assert ring.drain() == [_model_count(frames[: 250 * k]) for k in (1, 2, 3)]  # state kept across packets


def test_the_flows_example(lua):
    prog, ring = lua
    _script(prog, (EXAMPLES / "lua_flows.lua").read_text() + "\nWINDOW = 4\n")
    macs = (b"\x02" * 6, b"\x04" * 6)
    a = P.ether(*macs, P.ETH_IP4, P.ipv4("10.0.0.1", "10.0.0.2", P.UDP, P.udp("10.0.0.1", "10.0.0.2", 53, 4000,
                                                                                   b"q")))
    b = P.ether(*macs, P.ETH_IP4, P.ipv4("10.0.0.3", "10.0.0.2", P.TCP, P.tcp("10.0.0.3", "10.0.0.2", 5, 9999),
                                         options=b"\x01\x01\x01\x00"))
    c = P.ether(*macs, P.ETH_IP6, P.ipv6("fd00::1", "fd00::2", P.UDP, P.udp("fd00::1", "fd00::2", 7, 8, b"")))
    verdicts = [prog.run(f)[0] for f in (a, a, b, c, b, a)]
    assert verdicts == [XDPAction.PASS, XDPAction.PASS, XDPAction.DROP, XDPAction.PASS, XDPAction.DROP,
                        XDPAction.PASS]
    la, lb, lc = len(a), len(b), len(c)
    assert ring.drain() == [
        f"new flow udp 10.0.0.1:53 -> 10.0.0.2:4000, {la} bytes, mean {la:.1f}",
        f"new flow tcp 10.0.0.3:5 -> 10.0.0.2:9999, {lb} bytes, mean {(2 * la + lb) / 3:.1f}",
        f"new flow udp fd00:0:0:0:0:0:0:1:7 -> fd00:0:0:0:0:0:0:2:8, {lc} bytes, mean {(2 * la + lb + lc) / 4:.1f}",
    ]


def test_a_lua_error_is_reported_and_the_vm_goes_on(lua):
    prog, ring = lua
    vms = _script(prog, """
        n = 0
        function on_packet(pkt)
          n = n + 1
          if pkt:u8(0) == 0xee then error("bad packet " .. n) end
          if pkt:u8(0) == 0xef then local t = nil; return t.field end
          print("packet", n)
        end""")
    good, bad, worse = b"\x01" * 60, b"\xee" * 60, b"\xef" * 60
    prog.configure(default_verdict="drop")
    assert [prog.run(f)[0] for f in (good, bad, good, worse, good)] == \
        [XDPAction.PASS, XDPAction.DROP, XDPAction.PASS, XDPAction.DROP, XDPAction.PASS]
    lines = ring.drain()
    assert [ln for ln in lines if not ln.startswith("lua error")] == ["packet\t1", "packet\t3", "packet\t5"]
    errors = [ln for ln in lines if ln.startswith("lua error")]
    assert len(errors) == 2 and errors[0].endswith("script:5: bad packet 2")
    assert "attempt to index a nil value" in errors[1]
    fiber = next(f for f in range(prog.fibers) if vms.counts(f)["packets"])
    assert vms.counts(fiber) == {"packets": 5, "errors": 2, "aborts": 0, "skipped": 0}


def test_a_runaway_script_is_stopped(lua):
    prog, ring = lua
    _script(prog, """
        function on_packet(pkt)
          if pkt:u8(0) == 0xee then while true do end end
          print("fine")
        end""")
    assert [prog.run(f)[0] for f in (b"\xee" * 60, b"\x01" * 60)] == [XDPAction.PASS, XDPAction.PASS]
    lines = ring.drain()
    assert len(lines) == 2 and "more than 100000 Lua instructions" in lines[0] and lines[1] == "fine"
    assert prog.stats().budget == 0  # Lua's own step limit stopped it, not the capsule budget


def test_a_vm_left_unfinished_is_restored(lua):
    prog, ring = lua
    vms = _script(prog, """
        n = 0
        function on_packet(pkt)
          n = n + 1
          if pkt:u8(0) == 0xee then local s = 0; for i = 1, 50000 do s = s + i end end
          print("packet", n)
        end""")
    before = prog.stats().budget
    prog.configure(budget=30_000)  # the capsule budget runs out inside the VM, before Lua's step limit
    assert prog.run(b"\x01" * 60)[0] == XDPAction.PASS
    assert prog.run(b"\xee" * 60)[0] == XDPAction.PASS  # abandoned: the default verdict
    assert prog.stats().budget == before + 1
    fiber = next(f for f in range(prog.fibers) if vms.counts(f)["packets"])
    assert prog.run(b"\x01" * 60)[0] == XDPAction.PASS  # finds the VM busy: marks it broken
    assert vms.state(fiber) == BROKEN and vms.restore_broken() == [fiber] and vms.state(fiber) == READY
    assert prog.run(b"\x01" * 60)[0] == XDPAction.PASS
    lines = [ln for ln in ring.drain() if not ln.startswith("lua: cpu")]
    assert lines == ["packet\t1", "packet\t1"]  # the VM as the script's top level left it: n back to 0
    assert ring.events and ring.events[-1].kind == "budget"


def _printf(fmt: str, v: int) -> str:
    """C's printf of a 64-bit Lua integer, for the formats string.format passes on."""
    u = v & (1 << 64) - 1
    return {"d": str(v), "i": str(v), "u": str(u), "x": f"{u:x}", "X": f"{u:X}", "5d": f"{v:5d}",
            "-3d": f"{v:<3d}", "02x": f"{u:02x}"}[fmt]


def test_integers_are_formatted_as_printf_does(lua):
    """The observer formats plain integer formats itself (lua_unity.c), everything else through snprintf:
    both give what C's printf gives, as do tostring and "..", and a number that is not an integer."""
    prog, ring = lua
    values = [0, 1, -1, 9, 10, 255, 65535, -(1 << 63), (1 << 63) - 1, 123456789, -987654321]
    formats = ["d", "i", "u", "x", "X", "5d", "-3d", "02x"]
    literals = ", ".join("math.mininteger" if v == -(1 << 63) else str(v) for v in values)
    pattern = "|".join("%" + f for f in formats)
    args = ", ".join("v" for _ in formats)
    _script(prog, f"""
        VALUES = {{{literals}}}
        function on_packet(pkt)
          for _, v in ipairs(VALUES) do
            print(string.format("{pattern}", {args}), tostring(v), v .. "", 1.5)
          end
        end""")
    assert prog.run(b"\x01" * 60)[0] == XDPAction.PASS
    want = ["|".join(_printf(f, v) for f in formats) + f"\t{v}\t{v}\t1.5" for v in values]
    assert ring.drain() == want


def test_a_packet_method_wants_the_packet(lua):
    """The methods check their self by pointer: anything but this VM's packet is an error, not a read."""
    prog, ring = lua
    _script(prog, """
        function on_packet(pkt)
          local ok, err = pcall(pkt.u8, {}, 0)
          print(ok, err)
          print(pkt.len(pkt), #pkt, type(pkt), tostring(pkt):sub(1, 7))
        end""")
    assert prog.run(b"\x01" * 60)[0] == XDPAction.PASS
    lines = ring.drain()
    assert lines[0].startswith("false\t") and "capsule.packet expected, got table" in lines[0]
    assert lines[1] == "60\t60\tuserdata\tpacket("
