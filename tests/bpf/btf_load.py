"""A raw BPF_BTF_LOAD through ctypes, so BTF tests can ask the kernel itself without capsule.kernel."""

from __future__ import annotations

import ctypes
import os

_SYS_BPF = 321  # x86-64
_BPF_BTF_LOAD = 18
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall  # by name, so the requires_bpf guard (tests/conftest.py) can stand in for it


class _Attr(ctypes.Structure):
    _fields_ = [
        ("btf", ctypes.c_uint64),
        ("btf_log_buf", ctypes.c_uint64),
        ("btf_size", ctypes.c_uint32),
        ("btf_log_size", ctypes.c_uint32),
        ("btf_log_level", ctypes.c_uint32),
        ("pad", ctypes.c_uint8 * 108),
    ]


def kernel_accepts_btf(data: bytes) -> tuple[bool, str]:
    """Load ``data`` with BPF_BTF_LOAD; returns (accepted, verifier log). The fd is closed at once."""
    buf = ctypes.create_string_buffer(data, len(data))
    log = ctypes.create_string_buffer(1 << 16)
    attr = _Attr(ctypes.addressof(buf), ctypes.addressof(log), len(data), len(log), 1)
    fd = _syscall(_SYS_BPF, _BPF_BTF_LOAD, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd >= 0:
        os.close(fd)
        return True, ""
    err = ctypes.get_errno()
    return False, f"{os.strerror(err)}: {log.value.decode(errors='replace').strip()}"
