"""BPF arenas (BPF_MAP_TYPE_ARENA): one sparse memory region shared by BPF programs and this process.

An arena map has no keys or values: ``max_entries`` is its size in pages, ``BPF_F_MMAPABLE`` is mandatory and
``map_extra`` may fix the user-space address it will be mapped at (page aligned, not crossing a 4 GiB
boundary); with ``map_extra = 0`` the first ``mmap`` chooses it. No BTF is needed to create one. A program
reaches the arena through a 32-bit pointer: the kernel keeps the page of user address ``u`` at
``kern_vm_start + (u & 0xffffffff)``, so a program uses the low 32 bits of the user address (``ptr32``); only
for a 4 GiB-aligned arena (``align_4g``) are those equal to arena offsets. Pages come into existence when a
program calls ``bpf_arena_alloc_pages`` or when user space touches them (a fault allocates a zeroed page,
unless the map has ``BPF_F_SEGV_ON_FAULT``).

``Arena.memory`` is a writable ``memoryview`` of the whole mapping. With ``map_extra = 0`` it is backed by a
Python ``mmap`` (closing while views are exported raises ``BufferError`` rather than leaving them dangling);
a fixed address needs ``mmap(addr, MAP_FIXED_NOREPLACE)``, which Python's ``mmap`` cannot ask for, so that
path maps through libc and views of it must not outlive ``close()``.
"""

from __future__ import annotations

import ctypes
import mmap
import os

from capsule.bpf.uapi import MapFlags, MapType

from .maps import Map
from .sys import FD

PAGE = mmap.PAGESIZE
MAP_FIXED_NOREPLACE = 0x100000
_MAP_NORESERVE = 0x4000
_PROT_NONE = 0
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_madvise = _libc.madvise
_madvise.restype = ctypes.c_int
_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_POPULATE_WRITE = 23  # Linux 5.14: fault the pages in, writable, in one call
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def free_4g_aligned_address() -> int:
    """A 4 GiB-aligned address with 4 GiB free after it: reserve 8 GiB of address space (PROT_NONE, no
    memory), take the aligned point inside it, release the reservation."""
    span = 1 << 33
    p = _mmap(None, span, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if p is None or p == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"reserving address space: {os.strerror(err)}")
    _munmap(p, span)
    start: int = p
    return (start + (1 << 32) - 1) & ~((1 << 32) - 1)


class Arena(Map):
    """An arena map plus (after ``map()``, which ``create`` does by default) its user-space mapping."""

    def __init__(self, fd: FD, type: int, key_size: int, value_size: int, max_entries: int, *,
                 flags: int = 0, name: str = "", map_extra: int = 0) -> None:
        super().__init__(fd, type, key_size, value_size, max_entries, flags=flags, name=name, map_extra=map_extra)
        self._py_mmap: mmap.mmap | None = None
        self._raw: tuple[int, int] | None = None  # (address, length) of a libc mapping
        self._view: memoryview | None = None
        self.user_vm_start = 0

    @classmethod
    def create_arena(cls, pages: int, *, name: str = "arena", address: int = 0, flags: int = 0,
                     map_now: bool = True, align_4g: bool = False) -> Arena:
        """Create an arena of ``pages`` pages (at most 4 GiB), optionally at a fixed user ``address``.

        ``align_4g`` picks a free 4 GiB-aligned address, so that arena offsets and 32-bit arena pointers are
        the same numbers (``ptr32(off) == off``), which is what a wasm-style memory window wants.
        """
        if align_4g and not address:
            address = free_4g_aligned_address()
        if address % PAGE:
            raise ValueError(f"arena address {address:#x} is not page aligned")
        arena = cls.create(MapType.ARENA, 0, 0, pages, name=name, flags=int(flags) | MapFlags.MMAPABLE,
                           map_extra=address)
        assert isinstance(arena, Arena)
        if map_now:
            try:
                arena.map()
            except BaseException:
                arena.close()
                raise
        return arena

    @property
    def size(self) -> int:
        return self.max_entries * PAGE

    def map(self) -> memoryview:
        """mmap the whole arena into this process (once); returns ``memory``."""
        if self._view is not None:
            return self._view
        if self.map_extra:
            prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | MAP_FIXED_NOREPLACE
            p = _mmap(self.map_extra, self.size, prot, flags, self.fileno(), 0)
            if p is None or p == _MAP_FAILED:
                err = ctypes.get_errno()
                raise OSError(err, f"mmap of arena {self.name!r} at {self.map_extra:#x}: {os.strerror(err)}")
            self._raw = (p, self.size)
            self.user_vm_start = p
            self._view = memoryview((ctypes.c_ubyte * self.size).from_address(p)).cast("B")
        else:
            m = mmap.mmap(self.fileno(), self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            anchor = ctypes.c_char.from_buffer(m)
            self.user_vm_start = ctypes.addressof(anchor)
            del anchor
            self._py_mmap = m
            self._view = memoryview(m)
        return self._view

    @property
    def memory(self) -> memoryview:
        if self._view is None:
            raise ValueError(f"arena {self.name!r} is not mapped")
        return self._view

    def offset_of(self, user_address: int) -> int:
        """Arena offset of a user-space pointer (e.g. one a program got from ``bpf_arena_alloc_pages``)."""
        off = user_address - self.user_vm_start
        if not 0 <= off < self.size:
            raise ValueError(f"{user_address:#x} is outside arena {self.name!r}")
        return off

    @property
    def base32(self) -> int:
        """Low 32 bits of the user address: the 32-bit arena pointer of offset 0."""
        return self.user_vm_start & 0xFFFFFFFF

    def ptr32(self, offset: int) -> int:
        """The 32-bit value a program casts (``addr_space_cast(dst, src, 0, 1)``) to reach arena ``offset``.

        The kernel keeps each page at ``kern_vm_start`` plus the low 32 bits of its *user* address, so unless
        the arena is 4 GiB aligned this is not ``offset`` itself.
        """
        if not 0 <= offset < self.size:
            raise ValueError(f"offset {offset:#x} outside arena {self.name!r}")
        if self._view is None:
            raise ValueError(f"arena {self.name!r} is not mapped (its address is not fixed yet)")
        return (self.user_vm_start + offset) & 0xFFFFFFFF

    def populate(self, start: int, end: int) -> None:
        """Back arena offsets [start, end) with pages, as touching them from user space would (a program's
        access to a page nobody allocated reads 0 and loses stores), in one ``madvise`` call; page by page
        where the kernel lacks MADV_POPULATE_WRITE."""
        if not 0 <= start <= end <= self.size:
            raise ValueError(f"[{start:#x}, {end:#x}) is outside arena {self.name!r}")
        start -= start % PAGE
        end += -end % PAGE
        if start == end:
            return
        view = self.memory
        if _madvise(self.user_vm_start + start, end - start, MADV_POPULATE_WRITE) == 0:
            return
        for a in range(start, end, PAGE):
            view[a] = view[a]

    def read(self, offset: int, n: int) -> bytes:
        return bytes(self.memory[offset : offset + n])

    def write(self, offset: int, data: bytes) -> None:
        self.memory[offset : offset + len(data)] = data

    def unmap(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None
        if self._py_mmap is not None:
            self._py_mmap.close()
            self._py_mmap = None
        if self._raw is not None:
            _munmap(*self._raw)
            self._raw = None

    def close(self) -> None:
        self.unmap()
        super().close()
