"""The guest heap, walked from the host: after CPUs have allocated and freed concurrently, is it whole?

The layout is ``capsule/guest/hook/heap.h``'s: chunks tile the heap from ``start`` to the end sentinel, each
with an 8-byte header (the previous chunk's size, then its own size and flags); free chunks are linked into
the bin of their size. ``check`` verifies every invariant the allocator keeps and returns what it found.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

INUSE, FOREIGN = 1, 2
SMALL_BINS, BINS = 64, 96
LOCK_BROKEN = 0xFFFF_FFFF
_STATE = struct.Struct(f"<IIIII3I{BINS}IQQQQ")
STATE_SIZE = _STATE.size  # sizeof(struct capsule_heap): 448


class HeapError(Exception):
    """The heap breaks one of its invariants (with where)."""


@dataclass
class HeapReport:
    chunks: int
    used: int  # chunks in use (foreign ones not counted)
    free: int
    used_bytes: int  # bytes of chunks in use, headers included (what the allocator counts as in_use)
    free_bytes: int
    allocs: int
    frees: int
    failed: int
    broken: bool  # a fiber died holding the lock


def bin_of(size: int) -> int:
    if size <= 1024:
        return size // 16 - 1
    return min(SMALL_BINS + size.bit_length() - 1 - 10, BINS - 1)


def check(read: Callable[[int, int], bytes], heap: int, *, max_chunks: int = 1 << 22) -> HeapReport:
    """Walk the heap whose state is at guest address ``heap``; raise HeapError at the first broken
    invariant. ``read(addr, n)`` reads guest memory."""
    f = _STATE.unpack(read(heap, STATE_SIZE))
    lock, _locked, start, end = f[0], f[1], f[2], f[3]
    bitmap = f[5:8]
    bins = f[8 : 8 + BINS]
    allocs, frees, in_use, failed = f[8 + BINS :]
    if not start:
        return HeapReport(0, 0, 0, 0, 0, allocs, frees, failed, lock == LOCK_BROKEN)
    if start % 16 != 8 or end % 16 != 8 or end <= start:
        raise HeapError(f"bad bounds: start {start:#x}, end {end:#x}")
    data = read(start, end + 8 - start)

    def word(addr: int, k: int) -> int:
        return int(struct.unpack_from("<I", data, addr - start + 4 * k)[0])

    free_chunks: dict[int, int] = {}
    chunks = used = 0
    used_bytes = free_bytes = 0
    c, prev_size, prev_free = start, 0, False
    while c != end:
        if chunks >= max_chunks:
            raise HeapError("more chunks than the heap can hold: a loop in the sizes")
        prev, head = word(c, 0), word(c, 1)
        size = head & ~15
        if prev != prev_size:
            raise HeapError(f"chunk {c:#x}: its previous chunk's size is {prev_size}, its header says {prev}")
        if size < 16 or c + size > end:
            raise HeapError(f"chunk {c:#x}: size {size} runs past the end ({end:#x})")
        chunks += 1
        if head & INUSE:
            if not head & FOREIGN:
                used += 1
            used_bytes += size
            prev_free = False
        else:
            if prev_free:
                raise HeapError(f"chunk {c:#x}: two free chunks side by side (not coalesced)")
            free_chunks[c] = size
            free_bytes += size
            prev_free = True
        prev_size = size
        c += size
    if word(end, 1) != INUSE or word(end, 0) != prev_size:
        raise HeapError(f"the end sentinel at {end:#x} is damaged")
    if used_bytes != in_use:
        raise HeapError(f"{used_bytes} bytes in chunks in use, the allocator counts {in_use}")
    # every free chunk in exactly one list, the right one, with consistent links; and only those
    listed: set[int] = set()
    for b, first in enumerate(bins):
        if bool(first) != bool(bitmap[b // 32] >> (b % 32) & 1):
            raise HeapError(f"bin {b}: the bitmap says {'empty' if first else 'not empty'}")
        back, c = 0, first
        while c:
            if c not in free_chunks:
                raise HeapError(f"bin {b} lists {c:#x}, which is not a free chunk")
            if c in listed:
                raise HeapError(f"{c:#x} is listed twice (a loop in bin {b})")
            if bin_of(free_chunks[c]) != b:
                raise HeapError(f"{c:#x} (size {free_chunks[c]}) is in bin {b}, not {bin_of(free_chunks[c])}")
            if word(c, 3) != back:
                raise HeapError(f"{c:#x}: its back link is {word(c, 3):#x}, not {back:#x}")
            listed.add(c)
            back, c = c, word(c, 2)
    missing = set(free_chunks) - listed
    if missing:
        raise HeapError(f"free chunks in no list: {', '.join(hex(m) for m in sorted(missing)[:5])}")
    return HeapReport(chunks, used, len(free_chunks), used_bytes, free_bytes, allocs, frees, failed,
                      lock == LOCK_BROKEN)
