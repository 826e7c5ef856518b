"""Consuming a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) from Python, without libbpf.

The kernel exposes a ring buffer as two mappings of the map fd: the *consumer page* (offset 0, writable: the
consumer position) and, from offset one page, the *producer page* (the producer position) followed by the data
area mapped **twice** back to back, so a record that wraps around the end can be read as one contiguous slice.
Each record starts with an 8-byte header: ``u32 len`` (bit 31 BUSY: still being written, bit 30 DISCARD:
dropped by the producer) and ``u32 pg_off``; records are 8-byte aligned. The consumer reads up to the producer
position, stops at the first BUSY record, and publishes its new position so the producer can reuse the space.
"""

from __future__ import annotations

import mmap
import select
import struct
from collections.abc import Callable

from capsule.bpf.uapi import MapType

from .consts import RINGBUF_BUSY_BIT, RINGBUF_DISCARD_BIT, RINGBUF_HDR_SZ
from .maps import Map

PAGE = mmap.PAGESIZE
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
Callback = Callable[[bytes], object] | None


def create_ringbuf(size: int, name: str = "ringbuf") -> Map:
    """A RINGBUF map of ``size`` bytes (a power of two and a multiple of the page size)."""
    if size < PAGE or size & (size - 1):
        raise ValueError(f"ring buffer size {size} must be a power of two >= {PAGE}")
    return Map.create(MapType.RINGBUF, 0, 0, size, name=name)


class RingBuffer:
    """Reads the records of one RINGBUF map. ``poll``/``consume`` hand each record (bytes) to a callback or
    return them; ``wait`` blocks on epoll until data arrives or the timeout passes. Close it (or use ``with``)
    before closing the map."""

    def __init__(self, ring: Map) -> None:
        if ring.type != MapType.RINGBUF:
            raise TypeError(f"{ring.name} is not a RINGBUF map")
        self.map = ring
        self.size = ring.max_entries
        self._mask = self.size - 1
        fd = ring.fileno()
        self._cons = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        try:
            self._prod = mmap.mmap(fd, PAGE + 2 * self.size, mmap.MAP_SHARED, mmap.PROT_READ, offset=PAGE)
        except BaseException:
            self._cons.close()
            raise
        self._epoll = select.epoll()
        self._epoll.register(fd, select.EPOLLIN)

    # positions are u64 counters that only grow; the x86-64 and arm64 loads of an aligned u64 are atomic
    @property
    def consumer_pos(self) -> int:
        pos: int = _U64.unpack_from(self._cons, 0)[0]
        return pos

    @property
    def producer_pos(self) -> int:
        pos: int = _U64.unpack_from(self._prod, 0)[0]
        return pos

    def available(self) -> int:
        """Bytes (headers included) between the consumer and producer positions."""
        return self.producer_pos - self.consumer_pos

    def consume(self, callback: Callback = None, limit: int | None = None) -> list[bytes]:
        """Read every committed record now in the buffer (at most ``limit``); skip discarded ones.

        Returns the records (and passes each to ``callback`` if given). Stops early at a record still being
        written (BUSY) so that ordering is kept; it is read on the next call.
        """
        out: list[bytes] = []
        cons = self.consumer_pos
        prod = self.producer_pos
        while cons < prod and (limit is None or len(out) < limit):
            base = PAGE + (cons & self._mask)
            length = _U32.unpack_from(self._prod, base)[0]
            if length & RINGBUF_BUSY_BIT:
                break
            total = (RINGBUF_HDR_SZ + (length & ~(RINGBUF_BUSY_BIT | RINGBUF_DISCARD_BIT)) + 7) & ~7
            if not length & RINGBUF_DISCARD_BIT:
                n = length & ~RINGBUF_DISCARD_BIT
                rec = self._prod[base + RINGBUF_HDR_SZ : base + RINGBUF_HDR_SZ + n]
                out.append(rec)
                if callback is not None:
                    callback(rec)
            cons += total
            _U64.pack_into(self._cons, 0, cons)  # release the space as we go
            prod = self.producer_pos
        return out

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the kernel signals data (or ``timeout`` seconds pass); True when data is there."""
        if self.available() > 0:
            return True
        events = self._epoll.poll(-1 if timeout is None else timeout)
        return bool(events) or self.available() > 0

    def poll(self, timeout: float | None = None, callback: Callback = None) -> list[bytes]:
        """``wait`` then ``consume``."""
        self.wait(timeout)
        return self.consume(callback)

    def close(self) -> None:
        if not self._epoll.closed:
            self._epoll.close()
        self._prod.close()
        self._cons.close()

    def __enter__(self) -> RingBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
