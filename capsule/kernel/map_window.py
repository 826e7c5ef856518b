"""A window built from mmapable ARRAY maps, for kernels without ``BPF_MAP_TYPE_ARENA``.

Each piece is the value of a one-element ARRAY created with ``BPF_F_MMAPABLE``; mmap of the map's fd shares its
pages with the programs that use it. ``MapWindow`` reserves one span of address space (``PROT_NONE``, no
memory) and maps every piece at its offset inside it, so that a window offset means the same bytes as with an
arena (``Arena.memory``): a reader of the window does not know which tier it reads. Offsets outside every piece
are not mapped (touching them faults, as touching an arena page nobody allocated reads zero).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterable

from .arena import _MAP_FAILED, _MAP_NORESERVE, _PROT_NONE, PAGE, _mmap, _munmap
from .maps import Map

_MAP_FIXED = 0x10


class MapWindow:
    """``span`` bytes of address space with ``pieces`` ((map, window offset) pairs) mapped at their offsets."""

    def __init__(self, pieces: Iterable[tuple[Map, int]], span: int) -> None:
        self.pieces = sorted(((m, off, -(-m.value_size // PAGE) * PAGE) for m, off in pieces), key=lambda p: p[1])
        for (a, off, size), (b, nxt, _) in zip(self.pieces, self.pieces[1:], strict=False):
            if off + size > nxt:
                raise ValueError(f"window pieces {a.name!r} and {b.name!r} overlap")
        if any(off % PAGE or off + size > span for _, off, size in self.pieces):
            raise ValueError("a window piece is not page-aligned inside the window")
        self.size = span
        base = _mmap(None, span, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
        if base is None or base == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"reserving the window's address space: {os.strerror(err)}")
        self.base: int = base
        try:
            for m, off, size in self.pieces:
                p = _mmap(base + off, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED,
                          m.fileno(), 0)
                if p is None or p == _MAP_FAILED:
                    err = ctypes.get_errno()
                    raise OSError(err, f"mmap of window piece {m.name!r}: {os.strerror(err)} (was it created "
                                       f"with BPF_F_MMAPABLE?)")
        except BaseException:
            _munmap(base, span)
            raise
        self._view: memoryview | None = memoryview((ctypes.c_ubyte * span).from_address(base)).cast("B")

    @property
    def memory(self) -> memoryview:
        if self._view is None:
            raise ValueError("the map window is closed")
        return self._view

    def piece_end(self, offset: int) -> int:
        """Where the piece holding window ``offset`` ends; ``ValueError`` when no piece holds it."""
        for m, off, size in self.pieces:
            if off <= offset < off + size:
                return off + min(size, m.value_size)
        raise ValueError(f"window offset {offset:#x} is in no piece of the map window")

    def populate(self, start: int, end: int) -> None:
        """The pieces' pages exist from the maps' creation: only check that [start, end) lies in one piece."""
        if start < end and end > self.piece_end(start):
            raise ValueError(f"[{start:#x}, {end:#x}) passes the end of its window piece")

    def close(self) -> None:
        """Unmap the window (the maps stay open: their owner closes them)."""
        if self._view is not None:
            self._view.release()
            self._view = None
            _munmap(self.base, self.size)
