"""The process's open file descriptors, for the tests that check nothing they open stays open.

The fixtures built on these (``no_fd_leak``, ``no_kernel_fd_leak``) are in ``tests/conftest.py``; tests that
count around one call of their own import these directly.
"""

from __future__ import annotations

import os

_FD_DIR = "/proc/self/fd"


def open_fds(*, kernel_only: bool = False) -> dict[str, str]:
    """fd number -> what it refers to (``anon_inode:bpf-map``, a path, ``socket:[...]``). ``kernel_only``
    keeps the anonymous inodes (BPF maps, programs, links, BTF, stats): the objects capsule's kernel layer
    owns, without the files a library may cache for the life of the process (matplotlib's font)."""
    fds: dict[str, str] = {}
    for fd in os.listdir(_FD_DIR):
        try:
            target = os.readlink(f"{_FD_DIR}/{fd}")
        except OSError:  # the fd os.listdir itself used, closed by now
            continue
        if not kernel_only or target.startswith("anon_inode:"):
            fds[fd] = target
    return fds


def new_fds(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """The fds open in ``after`` that were not open (to the same thing) in ``before``."""
    return {fd: t for fd, t in sorted(after.items()) if before.get(fd) != t}


def bpf_fd_count() -> int:
    """How many BPF objects (programs, maps, BTF, links) this process holds open."""
    return sum(t.startswith("anon_inode:bpf") for t in open_fds(kernel_only=True).values())
