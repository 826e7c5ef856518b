"""A prepared hook program attached to a network interface, and the ``capsule.attach`` context manager.

``Attachment`` attaches the hook entry through a bpf_link (XDP, native or generic, or tcx ingress for tc),
reads the ring buffer (on demand with ``poll``, or from a background thread), and counts with bpf_stats while
attached, so ``stats()`` has the kernel's per-packet cost. ``close`` (or leaving ``with``) detaches, drains
the last records and releases every fd; nothing outlives it (a link ends with its fd).
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from capsule.bpf.spec import ObjectSpec
from capsule.bpf.uapi import AttachType
from capsule.compiler import hook_abi as h
from capsule.kernel.consts import XDPFlags
from capsule.kernel.link import Link, run_in_netns
from capsule.kernel.ringbuf import RingBuffer
from capsule.kernel.sys import FD, enable_stats

from .program import DEFAULT_BUDGET, DEFAULT_HEAP, DEFAULT_SNAPLEN, HookError, HookProgram, HookStats
from .ring import Event, Stream

XDP_MODES = {"native": XDPFlags.DRV_MODE, "generic": XDPFlags.SKB_MODE, None: 0}
LineSink = Callable[[int, int, str], None]


def netns_path(netns: str) -> str:
    """A namespace by name (``ip netns``) or path."""
    return netns if netns.startswith("/") else f"/run/netns/{netns}"


class Attachment:
    def __init__(self, program: HookProgram, dev: str, *, netns: str | None = None, mode: str | None = None,
                 on_line: LineSink | None = None, on_event: Callable[[Event], None] | None = None,
                 stats: bool = True) -> None:
        if mode not in XDP_MODES:
            raise HookError(f"no XDP mode {mode!r} (there are: native, generic)")
        if mode is not None and program.kind != "xdp":
            raise HookError("--mode is for XDP; a tc program is attached at tcx ingress")
        self.program = program
        self.dev = dev
        self.netns = netns
        self.lines: list[tuple[int, int, str]] = []
        self.after_poll: list[Callable[[], object]] = []  # run after every poll (the Lua VMs' restorer)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._stats_fd: FD | None = enable_stats() if stats else None
        self.link: Link | None = None
        self.ring: RingBuffer | None = None
        self.lua: object | None = None  # the Lua observer's VMs (``lua.LuaVMs``), when it is one
        try:
            self.ring = RingBuffer(program.inst.coll.maps[h.RING_MAP])
            self.stream = Stream(self.ring, program.inst.meta, on_line or self._keep, on_event)
            self.link = self._in_ns(lambda: self._attach(mode))
        except BaseException:
            self.close()
            raise

    def _in_ns(self, fn: Callable[[], Link]) -> Link:
        return run_in_netns(netns_path(self.netns), fn) if self.netns else fn()

    def _attach(self, mode: str | None) -> Link:
        try:
            ifindex = socket.if_nametoindex(self.dev)
        except OSError:
            where = f" in network namespace {self.netns}" if self.netns else ""
            raise HookError(f"no network interface {self.dev!r}{where}") from None
        if self.program.kind == "xdp":
            return Link.xdp(self.program.prog, ifindex, XDP_MODES[mode])
        return Link.create(self.program.prog, ifindex, AttachType.TCX_INGRESS)

    def _keep(self, fiber: int, fd: int, line: str) -> None:
        self.lines.append((fiber, fd, line))

    # -- output ------------------------------------------------------------------------------------------
    def poll(self, timeout: float = 0.0) -> int:
        """Wait up to ``timeout`` seconds for records, then hand every one over; how many."""
        if self.ring is None:
            return 0
        if timeout:
            self.ring.wait(timeout)
        with self._lock:
            n = self.stream.drain()
            for fn in self.after_poll:
                fn()
            return n

    def start(self, interval: float = 0.05) -> None:
        """Read the ring from a background thread until ``close``."""
        def loop() -> None:
            while not self._stop.is_set():
                self.poll(interval)

        self._thread = threading.Thread(target=loop, name="capsule-hook-ring", daemon=True)
        self._thread.start()

    @property
    def events(self) -> list[Event]:
        return self.stream.events

    # -- state ---------------------------------------------------------------------------------------------
    def stats(self) -> HookStats:
        return self.program.stats()

    def read(self, name: str) -> int:
        return self.program.read(name)

    def write(self, name: str, value: int | bytes) -> None:
        self.program.write(name, value)

    def configure(self, **kw: object) -> None:
        self.program.configure(**kw)  # type: ignore[arg-type]

    # -- the end -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Detach, hand over what is left in the ring, release everything (safe to call twice)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.link is not None:
            try:
                self.link.detach()
            finally:
                self.link.close()
                self.link = None
        if self.ring is not None:
            with self._lock:
                self.stream.drain()
                self.stream.lines.flush()
            self.ring.close()
            self.ring = None
        if self._stats_fd is not None:
            self._stats_fd.close()
            self._stats_fd = None

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def printer(out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, cpus: bool = True) -> LineSink:
    """A line sink that prints each line (``[cpu N]`` first, with ``cpus``) to ``out`` or ``err``."""
    def sink(fiber: int, fd: int, line: str) -> None:
        stream = err if fd == 2 else out
        stream.write(f"[cpu {fiber}] {line}\n" if cpus else f"{line}\n")
        stream.flush()
    return sink


@contextmanager
def attach(hook: str, program: str | Path | ObjectSpec | None = None, *, dev: str, netns: str | None = None,
           mode: str | None = None, default_verdict: str = "pass", lua: str | Path | None = None,
           budget: int = DEFAULT_BUDGET, snaplen: int = DEFAULT_SNAPLEN, heap: int = DEFAULT_HEAP,
           cflags: Sequence[str] = (), on_line: LineSink | None = None,
           on_event: Callable[[Event], None] | None = None) -> Iterator[Attachment]:
    """Build (cached), load, prepare and attach a packet handler (C sources, a .wasm, a hook .bpf.o) or,
    with ``lua``, the Lua observer running that script; detach and clean up when the block ends.

        with capsule.attach("xdp", "handler.c", dev="eth1", mode="generic") as h:
            time.sleep(10)
            print(h.stats().packets, h.read("flows"))

    Output lines go to ``on_line(cpu, fd, line)`` (default: kept in ``h.lines``), read from a background
    thread while the block runs.
    """
    from .build import hook_object, lua_observer

    if (program is None) == (lua is None):
        raise HookError("give a program, or a Lua script with lua=")
    if lua is not None:
        spec = lua_observer(hook)
    else:
        assert program is not None
        spec = program if isinstance(program, ObjectSpec) else hook_object(hook, [Path(program)], cflags)
    prog = HookProgram(spec, heap=heap, budget=budget, snaplen=snaplen, default_verdict=default_verdict)
    try:
        vms = None
        if lua is not None:
            from .lua import load_script
            vms = load_script(prog, Path(lua), on_line=on_line)
        with Attachment(prog, dev, netns=netns, mode=mode, on_line=on_line, on_event=on_event) as att:
            if vms is not None:
                att.after_poll.append(vms.restore_broken)
                att.lua = vms
            att.start()
            yield att
    finally:
        prog.close()
