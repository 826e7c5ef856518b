"""BTF and the kernel: loading a program's BTF blob, and finding kernel functions by name in vmlinux BTF.

``load_btf`` hands a complete BTF blob (header, types, strings; as ``capsule.bpf`` writes it or as clang left
it in ``.BTF``) to BPF_BTF_LOAD. Its FD is what programs and maps name as ``prog_btf_fd`` / ``btf_fd``.

``vmlinux_btf_id`` resolves kfunc names for ``call`` instructions with ``src = CallKind.KFUNC``, through the
project's BTF reader (``capsule.bpf.btf``, lazy decoding) over /sys/kernel/btf/vmlinux, parsed once per
process.
"""

from __future__ import annotations

import ctypes
import errno
import threading
from pathlib import Path

from capsule.bpf.btf import BTF, BTFError
from capsule.bpf.btf_types import Kind

from .consts import Cmd
from .errors import BTFLoadError
from .sys import FD, BtfInfo, BtfLoadAttr, addr, bpf_errno, get_fd_by_id, obj_get_info

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
_LOG_START = 1 << 16


def load_btf(data: bytes, *, log_level: int = 0) -> FD:
    """BPF_BTF_LOAD ``data``; raise ``BTFLoadError`` with the kernel's BTF log when it is refused.

    A first attempt without a log keeps the common case cheap; on failure the load is repeated with a log
    (grown until it fits) so the error says what the kernel disliked.
    """
    blob = ctypes.create_string_buffer(bytes(data), len(data))
    level = log_level
    size = _LOG_START if level else 0
    while True:
        log = ctypes.create_string_buffer(size) if size else None
        attr = BtfLoadAttr(btf=addr(blob), btf_size=len(data), btf_log_buf=addr(log), btf_log_size=size,
                           btf_log_level=level)
        fd, err = bpf_errno(Cmd.BTF_LOAD, attr)
        if fd >= 0:
            return FD(fd)
        if err == errno.ENOSPC and size and attr.btf_log_true_size > size:
            size = attr.btf_log_true_size
            continue
        if not level:  # ask again, with a log this time
            level, size = 1, _LOG_START
            continue
        text = log.value.decode(errors="replace") if log is not None else ""
        raise BTFLoadError(err, f"loading {len(data)} bytes of BTF", text)


def btf_fd_by_id(btf_id: int) -> FD:
    """An FD for a BTF object the kernel knows by id (e.g. a program's ``btf_id``)."""
    return get_fd_by_id(Cmd.BTF_GET_FD_BY_ID, btf_id)


def btf_info(fd: FD | int) -> BtfInfo:
    info = BtfInfo()
    obj_get_info(fd, info)
    return info


_vmlinux: BTF | None = None
_lock = threading.Lock()


def vmlinux_btf() -> BTF:
    """The running kernel's BTF (/sys/kernel/btf/vmlinux), parsed once per process (lazily: ~0.7 s for the
    record index, then name lookups are dict hits)."""
    global _vmlinux
    with _lock:
        if _vmlinux is None:
            _vmlinux = BTF.load_vmlinux(str(VMLINUX_BTF))
        return _vmlinux


def vmlinux_btf_id(name: str, kind: Kind = Kind.FUNC) -> int:
    """The vmlinux BTF id of a named type (by default a FUNC, i.e. a kfunc); ``KeyError`` when absent."""
    try:
        return vmlinux_btf().find_id(name, kind)
    except BTFError:
        raise KeyError(f"{kind.name} {name!r} not found in {VMLINUX_BTF}") from None
