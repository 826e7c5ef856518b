"""What the running kernel says about itself, for ``extern`` variables: ``__kconfig`` values and ``__ksym`` addresses.

libbpf fills a program's ``.kconfig`` map from the kernel's build configuration (``/proc/config.gz``, else
``/boot/config-$(uname -r)``) plus a few virtual ``LINUX_*`` values, and resolves typeless ``__ksym`` variables
through ``/proc/kallsyms``. This module does the same for ``capsule.kernel.collection``.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import struct
from pathlib import Path

from capsule.bpf.spec import KconfigVar

from .errors import LoadError

CONFIG_PATHS = (Path("/proc/config.gz"), Path(f"/boot/config-{os.uname().release}"))
KALLSYMS = Path("/proc/kallsyms")
TRI = {"n": 0, "y": 1, "m": 2}  # enum libbpf_tristate


@functools.cache
def kernel_config() -> dict[str, str]:
    """``CONFIG_X`` -> its value as written in the config ("y", "m", "1000", '"str"'); {} when unavailable."""
    for path in CONFIG_PATHS:
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode(errors="replace")
        out = {}
        for line in text.splitlines():
            if line.startswith("CONFIG_"):
                name, _, value = line.partition("=")
                out[name] = value
            elif m := re.match(r"# (CONFIG_\w+) is not set", line):
                out[m.group(1)] = "n"
        return out
    return {}


def kernel_version(release: str | None = None) -> int:
    """LINUX_KERNEL_VERSION: KERNEL_VERSION(major, minor, patch) of ``uname -r``, the patch capped at 255."""
    nums = [int(x) for x in re.findall(r"\d+", (release or os.uname().release))[:3]]
    major, minor, patch = (nums + [0, 0, 0])[:3]
    return (major << 16) + (minor << 8) + min(patch, 255)


@functools.cache
def kallsyms() -> dict[str, int]:
    """Kernel symbol -> address, from /proc/kallsyms (addresses read as 0 without CAP_SYSLOG)."""
    out: dict[str, int] = {}
    for line in KALLSYMS.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:  # module symbols have a 4th column, "[module]"
            out.setdefault(parts[2], int(parts[0], 16))
    return out


def _virtual(name: str) -> str | None:
    """libbpf's ``LINUX_*`` externs, as config-style values."""
    if name == "LINUX_KERNEL_VERSION":
        return str(kernel_version())
    if name == "LINUX_HAS_BPF_COOKIE":  # bpf_get_attach_cookie: Linux 5.15+
        return "y" if kernel_version() >= (5 << 16) + (15 << 8) else "n"
    if name == "LINUX_HAS_SYSCALL_WRAPPER":  # syscalls entered through __<arch>_sys_* wrappers
        return "y" if _has_syscall_wrapper() else "n"
    return None


@functools.cache
def _has_syscall_wrapper() -> bool:
    try:
        return any(s.startswith("__") and s.endswith("_sys_bpf") for s in kallsyms())
    except OSError:
        return False


def kconfig_value(var: KconfigVar) -> bytes:
    """The bytes of one ``__kconfig`` extern; ``LoadError`` when the kernel does not define it and it is not
    weak, or its value does not fit its C type."""
    value = _virtual(var.name) if var.name.startswith("LINUX_") else kernel_config().get(var.name)
    if value is None:
        if var.name.startswith("LINUX_") and not var.weak:
            raise LoadError(f"extern {var.name!r} (__kconfig): not a value this loader knows")
        if not var.weak:
            raise LoadError(f"extern {var.name!r} (__kconfig): not set in the kernel's configuration")
        return bytes(var.size)
    what = f"extern {var.name!r} (__kconfig, {var.kind}) = {value}"
    if var.kind in ("bool", "tristate", "char") and value in TRI:
        if var.kind == "char":
            return value.encode()
        if var.kind == "bool" and value == "m":
            raise LoadError(f"{what}: a module option cannot be a bool")
        return TRI[value].to_bytes(var.size, "little")
    if var.kind == "char_array":
        if not (value.startswith('"') and value.endswith('"')):
            raise LoadError(f"{what}: not a string")
        s = value[1:-1].encode()[: var.size - 1]
        return s.ljust(var.size, b"\0")
    if var.kind in ("int", "uint", "char"):
        try:
            n = int(value, 0)
        except ValueError:
            raise LoadError(f"{what}: not a number") from None
        signed = var.kind != "uint"
        try:
            return n.to_bytes(var.size, "little", signed=signed)
        except OverflowError:
            raise LoadError(f"{what}: does not fit in {var.size} bytes") from None
    raise LoadError(f"{what}: value does not suit the type")


def kconfig_contents(kconfig: list[KconfigVar], size: int) -> bytes:
    """The ``.kconfig`` map's value: every extern at its offset."""
    buf = bytearray(size)
    for v in kconfig:
        data = kconfig_value(v)
        struct.pack_into(f"{len(data)}s", buf, v.offset, data)
    return bytes(buf)
