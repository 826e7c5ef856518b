"""Killing a ``capsule attach`` (issue 15.2), and a handler printing more than its ring buffer holds.

The attach runs on a veth pair in two network namespaces this test creates (and deletes), with traffic while it
is attached. It is sent SIGKILL or SIGINT at a random moment (from a fixed seed, printed with each): while it
starts (building nothing: the object is built once; loading, preparing, attaching) or once it has attached.
Afterwards no program, map or link of it is left (SIGINT: the command's own clean-up, and exit status 0 once
attached; SIGKILL: the kernel's, since capsule attaches only through links its descriptors own), no XDP
program is on the device, no process is left, and the next attach works."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capsule.hooks import packets as P
from capsule.hooks.netns import VethPair, ip, namespaces
from tests import leaks

pytestmark = pytest.mark.requires_bpf

SEED = 152
KILLS = 6  # alternating SIGKILL and SIGINT; the second half once attached
HANDLER = Path(__file__).with_name("attach_flood.c")
FLOOD_LINES = 400  # attach_flood.c prints this many lines for a packet whose payload starts with 'F'
ETH_TEST = 0x88B5  # the IEEE "local experimental" EtherType: no stack in the namespaces answers it


def _capsule(*args: str) -> list[str]:
    return [sys.executable, "-m", "capsule.cli", *args]


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    obj = tmp_path_factory.mktemp("attach") / "flood.bpf.o"
    subprocess.run(_capsule("build", "--hook", "xdp", str(HANDLER), "-o", str(obj)), check=True,
                   capture_output=True, timeout=900)
    return obj


@pytest.fixture
def veth() -> Iterator[VethPair]:
    with VethPair(tag=f"{leaks.token()}-attach") as pair:
        yield pair
    assert not {pair.ns_a, pair.ns_b} & namespaces()


def _frames(v: VethPair, n: int, first: bytes) -> list[bytes]:
    return [P.ether(v.mac_a, v.mac_b, ETH_TEST, first + bytes(50)) for _ in range(n)]


def _attach(v: VethPair, obj: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_capsule("attach", "xdp", str(obj), "--dev", v.dev_a, "--netns", v.ns_a,
                                     "--interval", "0", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _xdp_on(v: VethPair) -> bool:
    """Whether the device has an XDP program (``ip -d link`` shows its "prog/xdp id N")."""
    return "prog/xdp" in ip("-n", v.ns_a, "-d", "link", "show", "dev", v.dev_a)


def _orphans(baseline: leaks.KernelBaseline) -> list[str]:
    return leaks.settle(lambda: leaks.leaked_objects(baseline, leaks.token(), set()), seconds=20)


def _left(obj: Path) -> list[str]:
    return [d for d in map(leaks.describe_pid, leaks.session_pids(leaks.token())) if str(obj) in d]


def _wait_attached(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "attached to" in line, line
    return line


def test_killing_an_attach(handler: Path, veth: VethPair) -> None:
    rng = random.Random(SEED)
    t0 = time.monotonic()
    proc = _attach(veth, handler, "--duration", "1")
    _wait_attached(proc)
    startup = time.monotonic() - t0
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    for k in range(KILLS):
        sig = signal.SIGKILL if k % 2 == 0 else signal.SIGINT
        attached = k >= KILLS // 2
        baseline = leaks.KernelBaseline.take()
        t0 = time.monotonic()
        proc = _attach(veth, handler)
        if attached:
            _wait_attached(proc)
            veth.send(_frames(veth, 5, b"x"))
            time.sleep(rng.uniform(0.0, 1.0))
        else:
            time.sleep(rng.uniform(0.0, startup))
        at = time.monotonic() - t0
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        what = f"{sig.name} at {at:.2f} s ({'attached' if attached else 'starting'}; seed {SEED}, kill {k}; " \
               f"status {proc.returncode})"
        if sig == signal.SIGINT and attached:
            assert proc.returncode == 0 and "capsule: detached;" in err, f"{what}\n{err[-2000:]}"
        # a traceback only from the interpreter's own start-up, before any of capsule's code runs
        starting = err.rstrip().endswith("KeyboardInterrupt") and "capsule" not in err
        assert "Traceback" not in err or starting, f"{what}\n{err[-2000:]}"
        assert not _xdp_on(veth), f"{what}: an XDP program is still on {veth.dev_a}"
        assert not _orphans(baseline), f"{what}: {_orphans(baseline)}"
        assert not _left(handler), f"{what}: {_left(handler)}"
        print(what)
    proc = _attach(veth, handler, "--duration", "2")  # and the next attach works
    _wait_attached(proc)
    veth.send(_frames(veth, 3, b"x"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert out.count(" bytes\n") >= 3 and "capsule: detached;" in err


def test_a_full_ring_is_counted_and_never_waited_for(handler: Path, veth: VethPair) -> None:
    """30 packets of 400 lines each at once: the ring overflows; the lost lines are counted in the summary, the
    printed and the lost lines add up to every line written, and the command ends when --duration says."""
    proc = _attach(veth, handler, "--duration", "4")
    _wait_attached(proc)
    t0 = time.monotonic()
    assert veth.send(_frames(veth, 30, b"F")) == 30
    out, err = proc.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, err[-2000:]
    m = re.search(r"detached; [\d.]+ s: (\d+) packets: .* ring drops (\d+)", err)
    assert m, err[-2000:]
    packets, drops = int(m[1]), int(m[2])
    flood = out.count(": flood line ")
    others = packets - 30  # anything else the device received got one line each
    assert drops > 0 and flood + drops + out.count(" bytes\n") == 30 * FLOOD_LINES + others, (flood, drops, out[-500:])
    assert elapsed < 4 + 30, f"the attach took {elapsed:.1f} s to end"
