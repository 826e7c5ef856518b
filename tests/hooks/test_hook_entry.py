"""The hook entry program on crafted frames (BPF_PROG_TEST_RUN of the very program that is attached): the
packet channel, verdicts, the per-packet budget, faults given the default verdict with a report and a guest
backtrace, the next packet unaffected, output through the ring buffer, and clean failures of what a
non-sleepable program cannot do."""

from __future__ import annotations

import pytest

from capsule.bpf.uapi import TcAction, XDPAction
from capsule.compiler import abi
from capsule.compiler import hook_abi as h
from capsule.hooks.program import HookError

pytestmark = pytest.mark.requires_bpf

FRAME = bytes([0x01, 0x02]) + bytes(58)
DROPPED = bytes([0xFF]) + bytes(59)


def test_verdicts_output_and_packet_info(load, faults_xdp):
    prog, ring = load(faults_xdp)
    got = [prog.run(f)[0] for f in (FRAME, DROPPED, FRAME + b"xy")]
    assert got == [XDPAction.PASS, XDPAction.DROP, XDPAction.PASS]
    cpu = prog.read("last_cpu")
    assert ring.drain() == ["packet 1: 60 bytes, first 01", "packet 3: 62 bytes, first 01"]
    assert all(fiber == cpu for fiber, _, _ in ring.lines)
    assert (prog.read("last_len"), prog.read("last_captured"), prog.read("last_seq"), prog.read("last_hook")) == \
        (62, 62, 3, h.HOOK_IDS["xdp"])
    st = prog.stats()
    assert (st.packets, st.passed, st.dropped, st.defaulted) == (3, 2, 1, 0)
    assert st.per_fiber[cpu]["packets"] == 3 and prog.read("handled") == 3


def test_snap_length_bounds_the_copy(load, faults_xdp):
    prog, ring = load(faults_xdp, snaplen=16)
    prog.run(FRAME * 4)
    assert (prog.read("last_len"), prog.read("last_captured")) == (240, 16)
    prog.configure(snaplen=0)
    prog.run(FRAME)
    assert (prog.read("last_len"), prog.read("last_captured")) == (60, 0)
    with pytest.raises(HookError, match="between 0 and 16384"):
        prog.configure(snaplen=h.PKT_MAX + 1)


FAULTS = {  # mode: (event kind, code, innermost function of the backtrace)
    1: ("budget", 0, "on_packet"),
    2: ("budget", 0, "recurse"),
    3: ("trap", abi.Trap.INT_DIV_ZERO, "divide"),
    4: ("trap", abi.Trap.OUT_OF_BOUNDS, "wild"),
    5: ("exit", 3, None),
}


@pytest.mark.parametrize("mode", FAULTS)
@pytest.mark.parametrize("default", ["pass", "drop"])
def test_a_fault_gets_the_default_verdict_and_the_next_packet_runs(load, faults_xdp, mode, default):
    prog, ring = load(faults_xdp, budget=200_000, default_verdict=default)
    want = XDPAction.PASS if default == "pass" else XDPAction.DROP
    for _ in range(2):  # the fiber is not left broken: the same fault, and a normal packet, again
        prog.write("mode", mode)
        assert prog.run(FRAME)[0] == want
        prog.write("mode", 0)
        assert prog.run(FRAME)[0] == XDPAction.PASS
    kind, code, where = FAULTS[mode]
    ring.drain()
    assert [(e.kind, e.code) for e in ring.events] == [(kind, code)] * 2
    assert [e.seq for e in ring.events] == [1, 3]
    if where is None:
        assert ring.events[0].backtrace == ()
    else:
        assert ring.events[0].backtrace[0] == where and "on_packet" in ring.events[0].backtrace
    assert [s for _, _, s in ring.lines] == ["packet 2: 60 bytes, first 01", "packet 4: 60 bytes, first 01"]
    st = prog.stats()
    counter = {"budget": st.budget, "trap": st.traps, "exit": st.exits}[kind]
    assert (counter, st.defaulted, st.packets) == (2, 2, 4)
    assert (st.passed, st.dropped) == ((4, 0) if default == "pass" else (2, 2))


def test_the_budget_bounds_a_looping_handler(load, faults_xdp):
    prog, ring = load(faults_xdp, budget=10_000)
    prog.write("mode", 1)
    prog.run(FRAME)
    small = prog.read("spins")
    prog.configure(budget=100_000)
    prog.run(FRAME)
    big = prog.read("spins") - small
    assert 0 < small <= 10_000 and 9 * small < big <= 10 * small  # every loop iteration is charged
    assert prog.stats().transitions >= 110_000


def test_bad_verdict_and_the_handlers_own_default(load, faults_xdp):
    prog, _ = load(faults_xdp, default_verdict="drop")
    for mode, action in ((6, XDPAction.DROP), (11, XDPAction.DROP), (10, XDPAction.TX)):
        prog.write("mode", mode)
        assert prog.run(FRAME)[0] == action
    st = prog.stats()
    assert (st.bad_verdict, st.defaulted, st.tx) == (1, 2, 1)


def test_a_changed_packet_is_written_back(load, faults_xdp):
    prog, _ = load(faults_xdp, snaplen=30)
    prog.write("mode", 7)
    action, out = prog.run(FRAME)
    assert action == XDPAction.PASS
    assert out == bytes(b ^ 0xFF for b in FRAME[:30]) + FRAME[30:]
    assert prog.stats().writebacks == 1


def test_the_copy_and_the_write_back_at_every_boundary(load, faults_xdp):
    """The copy moves blocks, then words, then bytes (hooks._copy): lengths around each boundary, both ways
    (the handler inverts what it got and the kernel writes it back), and nothing past the snap length."""
    import random

    prog, _ = load(faults_xdp)
    prog.write("mode", 7)
    rng = random.Random(11)
    sizes = sorted({n + d for n in (8, 64, 128, 192) for d in (-1, 0, 1)} | {14, 15, 60, 71, 73, 1500})
    for snaplen in (15, 64, 72, 2048):
        prog.configure(snaplen=snaplen)
        for n in (n for n in sizes if n >= 14):
            frame = rng.randbytes(n)
            action, out = prog.run(frame)
            k = min(n, snaplen)
            assert action == XDPAction.PASS and prog.read("last_captured") == k, (snaplen, n)
            assert out == bytes(b ^ 0xFF for b in frame[:k]) + frame[k:], (snaplen, n)


def test_atomic_wait_and_notify_in_a_hook(load, faults_xdp):
    """Nothing in a hook may sleep. notify wakes nobody (0 woken); a hook module's memory is not shared
    (it is built without wasm's threads ABI), so wait traps as the threads proposal says for an unshared
    memory ("expected shared memory"), with the default verdict and a report, whatever the timeout."""
    prog, ring = load(faults_xdp, default_verdict="drop")
    prog.write("mode", 12)
    assert prog.run(FRAME)[0] == XDPAction.PASS and prog.read("woken") == 0
    for mode in (13, 14):
        prog.write("mode", mode)
        assert prog.run(FRAME)[0] == XDPAction.DROP
    assert prog.read("waited") == 99  # never returned
    ring.drain()
    assert [(e.kind, e.code) for e in ring.events] == [("trap", abi.Trap.EXPECTED_SHARED)] * 2
    assert ring.events[0].backtrace[0] == "on_packet"
    st = prog.stats()
    assert (st.traps, st.defaulted, st.packets) == (2, 2, 3)


def test_malloc_fails_cleanly_when_the_heap_is_full(load, faults_xdp):
    prog, ring = load(faults_xdp, heap=2 << 20)
    size = prog.inst.memory_size
    prog.write("mode", 8)
    assert prog.run(FRAME)[0] == XDPAction.PASS
    n = prog.read("allocations")
    assert 16 <= n <= 40  # about 2 MiB of 64 KiB blocks: the heap did not grow on the hook
    assert ring.drain() == [f"allocated {n} blocks of 64 KiB before malloc failed"]
    assert prog.inst.memory_size == size
    prog.run(FRAME)
    assert prog.read("allocations") == n  # all freed: the same again
    assert prog.stats().defaulted == 0


def test_a_full_ring_drops_output_and_counts_it(load, faults_xdp):
    prog, ring = load(faults_xdp, ring_size=64 << 10, budget=1 << 30)
    prog.write("mode", 9)
    assert prog.run(FRAME)[0] == XDPAction.PASS
    lines = ring.drain()
    st = prog.stats()
    assert st.defaulted == 0 and st.ring_drops > 0 and len(lines) + st.ring_drops == 20000
    assert lines[:2] == ["line 0 of a flood", "line 1 of a flood"]
    assert all(line.endswith(" of a flood") for line in lines)


def test_tc_hook(load, faults_tc):
    prog, ring = load(faults_tc)
    assert prog.run(FRAME)[0] == TcAction.OK
    assert prog.run(DROPPED)[0] == TcAction.SHOT
    assert prog.read("last_hook") == h.HOOK_IDS["tc"]
    prog.write("mode", 10)  # TX is XDP's alone
    assert prog.run(FRAME)[0] == TcAction.OK
    prog.write("mode", 3)
    assert prog.run(FRAME)[0] == TcAction.OK
    ring.drain()
    assert [e.kind for e in ring.events] == ["trap"]
    st = prog.stats()
    assert (st.bad_verdict, st.traps, st.packets) == (1, 1, 4)


def test_paused_hook_and_cpus_without_a_fiber(load, faults_xdp):
    prog, _ = load(faults_xdp, default_verdict="drop")
    prog.configure(enabled=False)
    assert prog.run(FRAME)[0] == XDPAction.DROP
    prog.configure(enabled=True)
    prog.inst.set_u64(h.HOOK + h.CFG_FIBERS, 0)  # as if this CPU had no fiber
    assert prog.run(FRAME)[0] == XDPAction.DROP
    st = prog.stats()
    assert (st.disabled, st.no_fiber, st.packets) == (1, 1, 0)
    assert prog.read("handled") == 0


def test_guest_variables_by_name(load, faults_xdp):
    prog, _ = load(faults_xdp)
    prog.write("mode", 7)
    assert prog.read("mode") == 7
    prog.write("mode", 0)
    with pytest.raises(HookError, match="no global variable 'nope'"):
        prog.read("nope")
    with pytest.raises(HookError, match="mode is 4 bytes"):
        prog.write("mode", b"\0")
