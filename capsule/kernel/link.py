"""BPF links: attachments owned by a file descriptor (BPF_LINK_CREATE).

A link keeps a program attached for as long as its FD is open (or until ``detach()``), so an attachment
cannot outlive the process by accident. capsule attaches XDP programs this way (attach type BPF_XDP with the
interface index as target). The interface index is looked up in the *calling thread's* network namespace,
so attaching inside a namespace means making the bpf(2) call from a thread that entered it:
``run_in_netns`` does that without moving the rest of the process.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import SupportsInt, TypeVar

from capsule.bpf.uapi import AttachType

from .consts import Cmd, LinkType
from .sys import FD, HasFileno, LinkCreateAttr, LinkDetachAttr, LinkInfo, bpf, fd_number, obj_get_info

T = TypeVar("T")
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_setns = _libc.setns
_setns.argtypes = [ctypes.c_int, ctypes.c_int]
_setns.restype = ctypes.c_int


class Link:
    """An attachment. ``close()`` drops this FD (the attachment ends when the last FD to it closes);
    ``detach()`` ends the attachment now even if other FDs to the link exist."""

    def __init__(self, fd: FD, attach_type: int, target: int) -> None:
        self._fd = fd
        self.attach_type = attach_type
        self.target = target

    @classmethod
    def create(cls, prog: HasFileno | SupportsInt, target: int, attach_type: int, flags: int = 0) -> Link:
        """BPF_LINK_CREATE of ``prog`` (anything with ``fileno()``) on ``target`` (an fd or ifindex)."""
        pfd = fd_number(prog)
        attr = LinkCreateAttr(prog_fd=pfd, target_fd=target, attach_type=int(attach_type), flags=int(flags))
        name = AttachType(attach_type).name if attach_type in AttachType._value2member_map_ else attach_type
        fd = FD(bpf(Cmd.LINK_CREATE, attr, f"attaching program fd {pfd} as {name} to target {target}"))
        return cls(fd, attach_type, target)

    @classmethod
    def xdp(cls, prog: HasFileno | SupportsInt, ifindex: int, flags: int = 0) -> Link:
        """Attach an XDP program to the interface ``ifindex`` of the calling thread's network namespace.
        ``flags`` take ``XDPFlags`` (SKB_MODE for generic XDP, DRV_MODE for native)."""
        return cls.create(prog, ifindex, AttachType.XDP, flags)

    @property
    def fd(self) -> FD:
        return self._fd

    def fileno(self) -> int:
        return self._fd.fileno()

    def info(self) -> LinkInfo:
        info = LinkInfo()
        obj_get_info(self._fd, info)
        return info

    @property
    def id(self) -> int:
        link_id: int = self.info().id
        return link_id

    def ifindex(self) -> int:
        """For an XDP link: the interface it is attached to (0 once detached)."""
        info = self.info()
        if info.type != LinkType.XDP:
            raise TypeError("not an XDP link")
        ifindex: int = info.extra[0] & 0xFFFFFFFF
        return ifindex

    def detach(self) -> None:
        """BPF_LINK_DETACH: end the attachment now; the FD stays open (and must still be closed)."""
        bpf(Cmd.LINK_DETACH, LinkDetachAttr(link_fd=self.fileno()), "detaching link")

    def close(self) -> None:
        self._fd.close()

    @property
    def closed(self) -> bool:
        return self._fd.closed

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a helper thread that has joined the network namespace at path ``netns`` (e.g.
    ``/run/netns/NAME``), and return its result (or raise its exception). Only that thread changes namespace;
    FDs it creates (links, sockets) keep working from any thread afterwards."""
    results: list[T] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            nsfd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _setns(nsfd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(nsfd)
            results.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    t = threading.Thread(target=body, name=f"netns:{netns}")
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return results[0]
