"""The bpf(2) system call from Python: ``union bpf_attr`` layouts, the call itself, and an owned ``FD``.

Each command's part of ``union bpf_attr`` is a separate ctypes Structure laid out exactly as in
include/uapi/linux/bpf.h (Linux 6.18). The kernel accepts an attr shorter than its own union as long as it
covers the fields the command uses (the rest read as zero), so each Structure stops at the last field capsule
sets. ``tests/kernel/test_sys.py`` checks every offset against the C header with clang.

This is the only module that calls the kernel; everything above it passes Structures to ``bpf()``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import warnings
from ctypes import c_char, c_int32, c_uint8, c_uint32, c_uint64
from typing import Any, Protocol, Self, SupportsInt

from .consts import BPF_OBJ_NAME_LEN, BPF_TAG_SIZE, Cmd
from .errors import BPFError

# __NR_bpf differs per architecture (arch/*/include/uapi/asm/unistd*.h, generic table for the newer ones)
_SYS_BPF = {
    "x86_64": 321,
    "i386": 357,
    "i686": 357,
    "aarch64": 280,
    "riscv64": 280,
    "loongarch64": 280,
    "armv7l": 386,
    "ppc64le": 361,
    "ppc64": 361,
    "s390x": 351,
}

try:
    SYS_BPF = _SYS_BPF[platform.machine()]
except KeyError as exc:  # pragma: no cover - other architectures
    raise ImportError(f"capsule.kernel: unknown bpf(2) syscall number for {platform.machine()}") from exc

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]


# -- union bpf_attr, one Structure per command ---------------------------------------------------------------
class MapCreateAttr(ctypes.Structure):
    """BPF_MAP_CREATE."""

    _fields_ = [
        ("map_type", c_uint32),
        ("key_size", c_uint32),
        ("value_size", c_uint32),
        ("max_entries", c_uint32),
        ("map_flags", c_uint32),
        ("inner_map_fd", c_uint32),
        ("numa_node", c_uint32),
        ("map_name", c_char * BPF_OBJ_NAME_LEN),
        ("map_ifindex", c_uint32),
        ("btf_fd", c_uint32),
        ("btf_key_type_id", c_uint32),
        ("btf_value_type_id", c_uint32),
        ("btf_vmlinux_value_type_id", c_uint32),
        ("map_extra", c_uint64),
        ("value_type_btf_obj_fd", c_int32),
        ("map_token_fd", c_int32),
    ]


class MapElemAttr(ctypes.Structure):
    """BPF_MAP_{LOOKUP,UPDATE,DELETE}_ELEM, BPF_MAP_GET_NEXT_KEY (value is next_key), BPF_MAP_FREEZE."""

    _fields_ = [
        ("map_fd", c_uint32),
        ("key", c_uint64),
        ("value", c_uint64),  # or next_key
        ("flags", c_uint64),
    ]


class ProgLoadAttr(ctypes.Structure):
    """BPF_PROG_LOAD (up to fd_array_cnt, Linux 6.14+; the 6.18 signature fields are left out)."""

    _fields_ = [
        ("prog_type", c_uint32),
        ("insn_cnt", c_uint32),
        ("insns", c_uint64),
        ("license", c_uint64),
        ("log_level", c_uint32),
        ("log_size", c_uint32),
        ("log_buf", c_uint64),
        ("kern_version", c_uint32),
        ("prog_flags", c_uint32),
        ("prog_name", c_char * BPF_OBJ_NAME_LEN),
        ("prog_ifindex", c_uint32),
        ("expected_attach_type", c_uint32),
        ("prog_btf_fd", c_uint32),
        ("func_info_rec_size", c_uint32),
        ("func_info", c_uint64),
        ("func_info_cnt", c_uint32),
        ("line_info_rec_size", c_uint32),
        ("line_info", c_uint64),
        ("line_info_cnt", c_uint32),
        ("attach_btf_id", c_uint32),
        ("attach_prog_fd", c_uint32),  # union with attach_btf_obj_fd
        ("core_relo_cnt", c_uint32),
        ("fd_array", c_uint64),
        ("core_relos", c_uint64),
        ("core_relo_rec_size", c_uint32),
        ("log_true_size", c_uint32),
        ("prog_token_fd", c_int32),
        ("fd_array_cnt", c_uint32),
    ]


class ObjAttr(ctypes.Structure):
    """BPF_OBJ_PIN / BPF_OBJ_GET."""

    _fields_ = [
        ("pathname", c_uint64),
        ("bpf_fd", c_uint32),
        ("file_flags", c_uint32),
        ("path_fd", c_int32),
    ]


class TestRunAttr(ctypes.Structure):
    """BPF_PROG_TEST_RUN (a.k.a. BPF_PROG_RUN)."""

    __test__ = False  # not a pytest class

    _fields_ = [
        ("prog_fd", c_uint32),
        ("retval", c_uint32),
        ("data_size_in", c_uint32),
        ("data_size_out", c_uint32),
        ("data_in", c_uint64),
        ("data_out", c_uint64),
        ("repeat", c_uint32),
        ("duration", c_uint32),
        ("ctx_size_in", c_uint32),
        ("ctx_size_out", c_uint32),
        ("ctx_in", c_uint64),
        ("ctx_out", c_uint64),
        ("flags", c_uint32),
        ("cpu", c_uint32),
        ("batch_size", c_uint32),
    ]


class GetIdAttr(ctypes.Structure):
    """BPF_*_GET_NEXT_ID and BPF_*_GET_FD_BY_ID (``id`` is start_id/prog_id/map_id/btf_id/link_id)."""

    _fields_ = [
        ("id", c_uint32),
        ("next_id", c_uint32),
        ("open_flags", c_uint32),
    ]


class InfoAttr(ctypes.Structure):
    """BPF_OBJ_GET_INFO_BY_FD."""

    _fields_ = [
        ("bpf_fd", c_uint32),
        ("info_len", c_uint32),
        ("info", c_uint64),
    ]


class BtfLoadAttr(ctypes.Structure):
    """BPF_BTF_LOAD."""

    _fields_ = [
        ("btf", c_uint64),
        ("btf_log_buf", c_uint64),
        ("btf_size", c_uint32),
        ("btf_log_size", c_uint32),
        ("btf_log_level", c_uint32),
        ("btf_log_true_size", c_uint32),
        ("btf_flags", c_uint32),
        ("btf_token_fd", c_int32),
    ]


class LinkCreateAttr(ctypes.Structure):
    """BPF_LINK_CREATE. The per-attach-type union after ``flags`` is kept as raw words (``extra``); XDP uses
    none of it, TCX/netkit put relative_fd in extra[0] low half and expected_revision in extra[1]."""

    _fields_ = [
        ("prog_fd", c_uint32),  # union with map_fd (struct_ops)
        ("target_fd", c_uint32),  # union with target_ifindex
        ("attach_type", c_uint32),
        ("flags", c_uint32),
        ("extra", c_uint64 * 6),
    ]


class LinkDetachAttr(ctypes.Structure):
    """BPF_LINK_DETACH."""

    _fields_ = [("link_fd", c_uint32)]


class EnableStatsAttr(ctypes.Structure):
    """BPF_ENABLE_STATS."""

    _fields_ = [("type", c_uint32)]


class ProgBindMapAttr(ctypes.Structure):
    """BPF_PROG_BIND_MAP."""

    _fields_ = [("prog_fd", c_uint32), ("map_fd", c_uint32), ("flags", c_uint32)]


# -- info structs for BPF_OBJ_GET_INFO_BY_FD -----------------------------------------------------------------
class ProgInfo(ctypes.Structure):
    """struct bpf_prog_info."""

    _fields_ = [
        ("type", c_uint32),
        ("id", c_uint32),
        ("tag", c_uint8 * BPF_TAG_SIZE),
        ("jited_prog_len", c_uint32),
        ("xlated_prog_len", c_uint32),
        ("jited_prog_insns", c_uint64),
        ("xlated_prog_insns", c_uint64),
        ("load_time", c_uint64),
        ("created_by_uid", c_uint32),
        ("nr_map_ids", c_uint32),
        ("map_ids", c_uint64),
        ("name", c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", c_uint32),
        ("gpl_compatible", c_uint32),  # bit 0; the other 31 bits are padding
        ("netns_dev", c_uint64),
        ("netns_ino", c_uint64),
        ("nr_jited_ksyms", c_uint32),
        ("nr_jited_func_lens", c_uint32),
        ("jited_ksyms", c_uint64),
        ("jited_func_lens", c_uint64),
        ("btf_id", c_uint32),
        ("func_info_rec_size", c_uint32),
        ("func_info", c_uint64),
        ("nr_func_info", c_uint32),
        ("nr_line_info", c_uint32),
        ("line_info", c_uint64),
        ("jited_line_info", c_uint64),
        ("nr_jited_line_info", c_uint32),
        ("line_info_rec_size", c_uint32),
        ("jited_line_info_rec_size", c_uint32),
        ("nr_prog_tags", c_uint32),
        ("prog_tags", c_uint64),
        ("run_time_ns", c_uint64),
        ("run_cnt", c_uint64),
        ("recursion_misses", c_uint64),
        ("verified_insns", c_uint32),
        ("attach_btf_obj_id", c_uint32),
        ("attach_btf_id", c_uint32),
    ]


class MapInfo(ctypes.Structure):
    """struct bpf_map_info."""

    _fields_ = [
        ("type", c_uint32),
        ("id", c_uint32),
        ("key_size", c_uint32),
        ("value_size", c_uint32),
        ("max_entries", c_uint32),
        ("map_flags", c_uint32),
        ("name", c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", c_uint32),
        ("btf_vmlinux_value_type_id", c_uint32),
        ("netns_dev", c_uint64),
        ("netns_ino", c_uint64),
        ("btf_id", c_uint32),
        ("btf_key_type_id", c_uint32),
        ("btf_value_type_id", c_uint32),
        ("btf_vmlinux_id", c_uint32),
        ("map_extra", c_uint64),
    ]


class BtfInfo(ctypes.Structure):
    """struct bpf_btf_info."""

    _fields_ = [
        ("btf", c_uint64),
        ("btf_size", c_uint32),
        ("id", c_uint32),
        ("name", c_uint64),
        ("name_len", c_uint32),
        ("kernel_btf", c_uint32),
    ]


class LinkInfo(ctypes.Structure):
    """struct bpf_link_info: the common head, then the per-type union as raw words (xdp: ifindex in the
    low half of extra[0])."""

    _fields_ = [
        ("type", c_uint32),
        ("id", c_uint32),
        ("prog_id", c_uint32),
        ("extra", c_uint64 * 8),
    ]


# -- the call ------------------------------------------------------------------------------------------------
def addr(obj: ctypes.Array[Any] | ctypes.Structure | None) -> int:
    """The address of a ctypes buffer, or 0 for None: what ``__aligned_u64`` pointer fields want."""
    return 0 if obj is None else ctypes.addressof(obj)


def bpf(cmd: Cmd, attr: ctypes.Structure, message: str = "", *, retry_eagain: int = 0) -> int:
    """Call bpf(cmd, &attr, sizeof(attr)); return the non-negative result or raise ``BPFError``.

    EINTR is always retried. ``retry_eagain`` retries EAGAIN that many times (PROG_LOAD returns it when the
    verifier is interrupted by a signal, as libbpf also handles).
    """
    size = ctypes.sizeof(attr)
    while True:
        ret: int = _syscall(SYS_BPF, int(cmd), ctypes.addressof(attr), size)
        if ret >= 0:
            return ret
        err = ctypes.get_errno()
        if err == errno.EINTR:
            continue
        if err == errno.EAGAIN and retry_eagain > 0:
            retry_eagain -= 1
            continue
        raise BPFError(err, cmd, message)


def bpf_errno(cmd: Cmd, attr: ctypes.Structure) -> tuple[int, int]:
    """Like ``bpf`` but return (result, errno) instead of raising; for callers that inspect the attr after a
    failure (PROG_LOAD's log_true_size) or treat an errno as an answer (ENOENT from GET_NEXT_KEY)."""
    size = ctypes.sizeof(attr)
    while True:
        ret: int = _syscall(SYS_BPF, int(cmd), ctypes.addressof(attr), size)
        if ret >= 0:
            return ret, 0
        err = ctypes.get_errno()
        if err != errno.EINTR:
            return ret, err


def name_bytes(name: str) -> bytes:
    """An object name as the kernel accepts it: at most 15 bytes of [A-Za-z0-9_.]; others become '_'."""
    clean = "".join(c if (c.isascii() and (c.isalnum() or c in "_.")) else "_" for c in name)
    return clean.encode()[: BPF_OBJ_NAME_LEN - 1]


# -- owned file descriptors ----------------------------------------------------------------------------------
class HasFileno(Protocol):
    """Anything that names a file descriptor by ``fileno()``: an ``FD``, a map, a program, a link."""

    def fileno(self) -> int: ...


def fd_number(obj: HasFileno | SupportsInt) -> int:
    """The descriptor number of ``obj``: its ``fileno()``, else ``int(obj)`` (a plain number)."""
    return obj.fileno() if hasattr(obj, "fileno") else int(obj)


class FD:
    """Owns one file descriptor and closes it exactly once.

    ``close()`` (or leaving a ``with`` block) closes it; ``__del__`` is a safety net that closes a forgotten
    descriptor and warns with ``ResourceWarning`` so leaks show up in tests. ``int(fd)`` / ``fileno()`` give
    the number and raise once it is closed, so a stale number is never passed to the kernel.
    """

    __slots__ = ("_fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        if fd < 0:
            raise ValueError(f"invalid file descriptor {fd}")
        self._fd: int | None = fd

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("operation on a closed FD")
        return self._fd

    __int__ = fileno
    __index__ = fileno

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def detach(self) -> int:
        """Give up ownership: return the number; this object no longer closes it."""
        fd = self.fileno()
        self._fd = None
        return fd

    def dup(self) -> FD:
        return FD(os.dup(self.fileno()))

    def __enter__(self) -> FD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            warnings.warn(f"unclosed FD {self._fd}", ResourceWarning, stacklevel=2)
            self.close()

    def __repr__(self) -> str:
        return f"FD({self._fd})" if self._fd is not None else "FD(closed)"


class Owner:
    """Something that owns one FD (a map, a program): ``fileno``, ``close`` (exactly once) and ``with``."""

    _fd: FD

    @property
    def fd(self) -> FD:
        return self._fd

    def fileno(self) -> int:
        return self._fd.fileno()

    def close(self) -> None:
        self._fd.close()

    @property
    def closed(self) -> bool:
        return self._fd.closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def obj_get_info(fd: int | FD, info: ctypes.Structure) -> ctypes.Structure:
    """Fill ``info`` (ProgInfo, MapInfo, BtfInfo, LinkInfo) for a bpf object fd."""
    attr = InfoAttr(bpf_fd=int(fd), info_len=ctypes.sizeof(info), info=addr(info))
    bpf(Cmd.OBJ_GET_INFO_BY_FD, attr, "reading object info")
    return info


def get_fd_by_id(cmd: Cmd, obj_id: int) -> FD:
    """BPF_{PROG,MAP,BTF,LINK}_GET_FD_BY_ID: a new FD for an object the kernel knows by id."""
    return FD(bpf(cmd, GetIdAttr(id=obj_id), f"opening id {obj_id}"))


def enable_stats(kind: int = 0) -> FD:
    """BPF_ENABLE_STATS: run-time statistics stay on while the returned FD is open."""
    return FD(bpf(Cmd.ENABLE_STATS, EnableStatsAttr(type=kind), "enabling run-time stats"))
