"""What comes out of a hook: the records of its ring buffer, decoded (``hook_abi``'s layout).

Output records carry at most ``OUT_MAX`` bytes of one write to stdout or stderr; ``Lines`` joins them back
into lines per fiber and stream (records of one fiber arrive in the order it wrote them; the fibers'
records interleave). Event records say that a packet was given the default verdict because its handler
trapped, ran out of budget or exited, with the guest backtrace: the return regions the kernel found on the
fiber's software stack, named here from the object's metadata as ``Instance.backtrace`` names them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from capsule.compiler import abi
from capsule.compiler import hook_abi as h
from capsule.compiler.meta import Meta
from capsule.kernel.ringbuf import RingBuffer

_HEADER = struct.Struct("<IIQ")


@dataclass(frozen=True)
class Output:
    fiber: int
    seq: int  # the fiber's packet count when it was written
    fd: int
    data: bytes


@dataclass(frozen=True)
class Event:
    """A packet its handler did not finish: ``kind`` is "trap", "budget" or "exit"."""

    kind: str
    fiber: int
    seq: int
    code: int  # the trap code, or the exit status
    backtrace: tuple[str, ...]

    @property
    def message(self) -> str:
        if self.kind == "trap":
            what = f"trap: {abi.Trap(self.code).message}" if self.code in abi.Trap._value2member_map_ \
                else f"trap {self.code}"
        elif self.kind == "budget":
            what = "budget used up"
        else:
            what = f"exit({self.code})"
        where = f" in {' <- '.join(self.backtrace)}" if self.backtrace else ""
        return f"cpu {self.fiber} packet {self.seq}: {what}{where}"


Record = Output | Event
_KINDS = {h.Record.TRAP: "trap", h.Record.BUDGET: "budget", h.Record.EXIT: "exit"}


def decode(rec: bytes, meta: Meta) -> Record | None:
    """One ring record (None for a record of a kind this host does not know)."""
    if len(rec) < h.REC_HEADER:
        return None
    kind, fiber, seq = _HEADER.unpack_from(rec, 0)
    if kind == h.Record.OUT:
        fd, n = struct.unpack_from("<II", rec, h.OUT_FD)
        return Output(fiber, seq, fd, rec[h.OUT_DATA : h.OUT_DATA + min(n, h.OUT_MAX)])
    if kind in _KINDS and len(rec) >= h.EV_RECORD:
        code, inlined, region, depth = struct.unpack_from("<IIII", rec, h.EV_CODE)
        frames = struct.unpack_from(f"<{h.EV_MAX_FRAMES}I", rec, h.EV_FRAMES)[: min(depth, h.EV_MAX_FRAMES)]
        return Event(_KINDS[kind], fiber, seq, code, backtrace(meta, inlined, region, frames))
    return None


def backtrace(meta: Meta, inlined: int, region: int, frames: tuple[int, ...]) -> tuple[str, ...]:
    """Function names from where the packet stopped outwards (an inlined callee first)."""
    names = []
    if inlined and inlined - 1 < len(meta.funcs):
        names.append(meta.funcs[inlined - 1].name)
    for r in (region, *frames):
        if r in meta.regions:
            names.append(meta.funcs[meta.regions[r]].name)
    return tuple(names)


class Lines:
    """Joins output records into whole lines per (fiber, fd); ``flush`` hands over what is left."""

    def __init__(self, sink: Callable[[int, int, str], None]) -> None:
        self.sink = sink  # (fiber, fd, line without its newline)
        self._partial: dict[tuple[int, int], bytes] = {}

    def add(self, out: Output) -> None:
        key = (out.fiber, out.fd)
        data = self._partial.pop(key, b"") + out.data
        *lines, rest = data.split(b"\n")
        for line in lines:
            self.sink(out.fiber, out.fd, line.decode(errors="replace"))
        if rest:
            self._partial[key] = rest

    def flush(self) -> None:
        for (fiber, fd), rest in sorted(self._partial.items()):
            self.sink(fiber, fd, rest.decode(errors="replace"))
        self._partial.clear()


class Stream:
    """The ring buffer of a loaded hook program, read on demand: output lines to ``on_line``, events to
    ``on_event`` (and kept in ``events``)."""

    def __init__(self, ring: RingBuffer, meta: Meta, on_line: Callable[[int, int, str], None],
                 on_event: Callable[[Event], None] | None = None) -> None:
        self.ring = ring
        self.meta = meta
        self.lines = Lines(on_line)
        self.on_event = on_event
        self.events: list[Event] = []
        self.records = 0

    def drain(self) -> int:
        """Handle every record now in the ring; how many there were."""
        n = 0
        for raw in self.ring.consume():
            n += 1
            rec = decode(raw, self.meta)
            if isinstance(rec, Output):
                self.lines.add(rec)
            elif isinstance(rec, Event):
                self.events.append(rec)
                if self.on_event is not None:
                    self.on_event(rec)
        self.records += n
        return n

    def wait(self, timeout: float) -> None:
        self.ring.wait(timeout)
