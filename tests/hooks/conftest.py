"""What the hook tests share: handlers built once a session, loaded hook programs that are always closed, a
reader of their ring buffer, and veth pairs in namespaces of our own that are always deleted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from capsule.bpf.spec import ObjectSpec
from capsule.compiler import hook_abi as h
from capsule.hooks import netns
from capsule.hooks.build import hook_object
from capsule.hooks.netns import VethPair, namespaces
from capsule.hooks.program import HookProgram
from capsule.hooks.ring import Event, Stream
from capsule.kernel.ringbuf import RingBuffer

PROGRAMS = Path(__file__).parent / "programs"
PINS = Path("/sys/fs/bpf")
EXAMPLES = Path(__file__).resolve().parents[2] / "capsule" / "examples"


@pytest.fixture(scope="session")
def faults_xdp() -> ObjectSpec:
    return hook_object("xdp", [PROGRAMS / "faults.c"])


@pytest.fixture(scope="session")
def faults_tc() -> ObjectSpec:
    return hook_object("tc", [PROGRAMS / "faults.c"])


class Collector:
    """The ring buffer of a loaded hook program, read on demand: its lines and events."""

    def __init__(self, prog: HookProgram) -> None:
        self.ring = RingBuffer(prog.inst.coll.maps[h.RING_MAP])
        self.lines: list[tuple[int, int, str]] = []
        self.events: list[Event] = []
        self.stream = Stream(self.ring, prog.inst.meta, lambda f, fd, s: self.lines.append((f, fd, s)),
                             self.events.append)

    def drain(self) -> list[str]:
        """Read everything now in the ring; the text of the lines that came with it."""
        before = len(self.lines)
        self.stream.drain()
        self.stream.lines.flush()
        return [s for _, _, s in self.lines[before:]]

    def close(self) -> None:
        self.ring.close()


@pytest.fixture
def load(no_kernel_fd_leak: None) -> Iterator[Callable[..., tuple[HookProgram, Collector]]]:
    """``load(spec, **options)``: a prepared HookProgram and a Collector of its ring, closed after the test
    (and no kernel fd may be left open then)."""
    opened: list[tuple[HookProgram, Collector]] = []

    def make(spec: ObjectSpec, **kw: object) -> tuple[HookProgram, Collector]:
        prog = HookProgram(spec, **kw)  # type: ignore[arg-type]
        pair = (prog, Collector(prog))
        opened.append(pair)
        return pair

    yield make
    for prog, col in reversed(opened):
        col.close()
        prog.close()


@pytest.fixture
def veth() -> Iterator[VethPair]:
    """Two fresh namespaces joined by a veth pair; after the test neither namespace may be left."""
    with VethPair() as pair:
        yield pair
    left = {pair.ns_a, pair.ns_b} & namespaces()
    assert not left, f"namespaces left behind: {left}"


@pytest.fixture(autouse=True)
def nothing_left_behind(no_kernel_fd_leak: None) -> Iterator[None]:
    """After every hook test: no kernel object's fd left open (so no program, map or link of ours is alive:
    a link ends with its fd, and nothing is pinned), no namespace of ours left (so no veth, and no XDP or tc
    attachment on one), no new pin. Pins other tests make at the same time (``tests.leaks.pin_path``, in other
    xdist workers) are theirs, and the session's check looks after them."""
    before = _pins()
    yield
    assert not netns.OPEN, f"namespaces still open: {netns.OPEN}"
    left = namespaces() & netns.MADE
    assert not left, f"namespaces left behind: {left}"
    new = [p for p in _pins() - before if not p.name.startswith("capsule-test-")]
    assert not new, f"pins left behind: {new}"


def _pins() -> set[Path]:
    return {p for p in PINS.rglob("*") if "capsule" in p.name} if PINS.is_dir() else set()
