"""BPF maps from Python: create, read and write elements, iterate keys.

A ``Map`` owns its FD and knows its shape, so callers pass keys and values as bytes (exactly ``key_size`` /
``value_size`` long) or as ints (packed little-endian to the key/value size). Per-CPU maps hold one value per
*possible* CPU, each slot rounded up to 8 bytes, which is what the kernel copies in and out; ``lookup_percpu``
splits it. Arena and ring-buffer maps, which are memory rather than elements, live in ``arena.py`` and
``ringbuf.py`` and build on ``Map.create``.
"""

from __future__ import annotations

import ctypes
import errno
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import SupportsInt

from capsule.bpf.spec import MapSpec
from capsule.bpf.uapi import PERCPU_MAP_TYPES, MapFlags, MapType

from .consts import Cmd, UpdateFlags
from .errors import BPFError
from .sys import (
    FD,
    HasFileno,
    MapCreateAttr,
    MapElemAttr,
    MapInfo,
    Owner,
    addr,
    bpf,
    bpf_errno,
    fd_number,
    name_bytes,
    obj_get_info,
)

Key = bytes | int
Value = bytes | int


@functools.cache
def possible_cpus() -> int:
    """Number of possible CPUs (``/sys/devices/system/cpu/possible``, e.g. "0-3" or "0,2-5"): per-CPU maps
    keep one value slot per possible CPU, not per online CPU."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) if hi else int(lo)) - int(lo) + 1
    return n


def _round8(n: int) -> int:
    return (n + 7) & ~7


class Map(Owner):
    """A live BPF map. Use as a context manager or call ``close()``; the FD is closed exactly once."""

    def __init__(self, fd: FD, type: int, key_size: int, value_size: int, max_entries: int, *,
                 flags: int = 0, name: str = "", map_extra: int = 0) -> None:
        self._fd = fd
        self.type = MapType(type)
        self.key_size = key_size
        self.value_size = value_size
        self.max_entries = max_entries
        self.flags = flags
        self.name = name
        self.map_extra = map_extra

    # -- creation ----------------------------------------------------------------------------------------
    @classmethod
    def create(cls, type: int, key_size: int, value_size: int, max_entries: int, *, name: str = "",
               flags: int = 0, map_extra: int = 0, btf_fd: FD | int | None = None, btf_key_type_id: int = 0,
               btf_value_type_id: int = 0, inner_map_fd: FD | int | None = None,
               numa_node: int | None = None) -> Map:
        """BPF_MAP_CREATE. ``btf_fd`` with key/value type ids attaches BTF (needed for maps holding special
        fields such as spin locks or kptrs; plain maps work without it)."""
        if numa_node is not None:
            flags |= MapFlags.NUMA_NODE
        attr = MapCreateAttr(
            map_type=int(type), key_size=key_size, value_size=value_size, max_entries=max_entries,
            map_flags=int(flags), inner_map_fd=int(inner_map_fd) if inner_map_fd is not None else 0,
            numa_node=numa_node or 0, map_name=name_bytes(name),
            btf_fd=int(btf_fd) if btf_fd is not None else 0,
            btf_key_type_id=btf_key_type_id, btf_value_type_id=btf_value_type_id, map_extra=map_extra,
        )
        label = MapType(type).label
        what = (f"creating {label} map {name!r} (key {key_size}, value {value_size}, "
                f"max_entries {max_entries}, flags {int(flags):#x})")
        fd = FD(bpf(Cmd.MAP_CREATE, attr, what))
        return cls(fd, type, key_size, value_size, max_entries, flags=int(flags), name=name,
                   map_extra=map_extra)

    @classmethod
    def from_spec(cls, spec: MapSpec, *, btf_fd: FD | int | None = None,
                  inner_map_fd: FD | int | None = None) -> Map:
        """Create the map a ``MapSpec`` describes; fill element 0 from ``contents`` and freeze if asked.
        A map-in-map needs ``inner_map_fd``, a map of the shape its slots will hold."""
        use_btf = btf_fd is not None and (spec.btf_key_type_id or spec.btf_value_type_id)
        m = cls.create(spec.type, spec.key_size, spec.value_size, spec.max_entries, name=spec.name,
                       flags=spec.flags, map_extra=spec.map_extra, btf_fd=btf_fd if use_btf else None,
                       btf_key_type_id=spec.btf_key_type_id if use_btf else 0,
                       btf_value_type_id=spec.btf_value_type_id if use_btf else 0, inner_map_fd=inner_map_fd)
        try:
            if spec.contents is not None:
                data = spec.contents.ljust(spec.value_size, b"\0")
                m.update(0, data)
            if spec.freeze:
                m.freeze()
        except BaseException:
            m.close()
            raise
        return m

    @classmethod
    def global_data(cls, name: str, data: bytes, *, readonly: bool = False, mmapable: bool = False) -> Map:
        """A global-data map (.data/.bss/.rodata): ARRAY of one element holding ``data``. ``readonly``
        makes it .rodata: BPF_F_RDONLY_PROG and frozen, so the verifier may fold loads from it."""
        flags = MapFlags.RDONLY_PROG if readonly else 0
        if mmapable:
            flags |= MapFlags.MMAPABLE
        spec = MapSpec(name=name, type=MapType.ARRAY, key_size=4, value_size=max(len(data), 1),
                       max_entries=1, flags=int(flags), contents=data, freeze=readonly)
        return cls.from_spec(spec)

    def __repr__(self) -> str:
        return f"<Map {self.name!r} {self.type.name} fd={self._fd!r}>"

    # -- shapes ------------------------------------------------------------------------------------------
    @property
    def percpu(self) -> bool:
        return self.type in PERCPU_MAP_TYPES

    @property
    def user_value_size(self) -> int:
        """Bytes the kernel copies for one value: ``value_size``, or 8-rounded per possible CPU."""
        if self.percpu:
            return _round8(self.value_size) * possible_cpus()
        return self.value_size

    def _key(self, key: Key) -> ctypes.Array[ctypes.c_char]:
        if isinstance(key, int):
            raw = key.to_bytes(self.key_size, "little", signed=key < 0)
        else:
            raw = bytes(key)
            if len(raw) != self.key_size:
                raise ValueError(f"{self.name}: key is {len(raw)} bytes, map key_size is {self.key_size}")
        return ctypes.create_string_buffer(raw, max(len(raw), 1))

    def _value(self, value: Value) -> ctypes.Array[ctypes.c_char]:
        size = self.user_value_size
        if isinstance(value, int):
            raw = value.to_bytes(self.value_size, "little", signed=value < 0)
            if self.percpu:  # the same value on every CPU
                raw = raw.ljust(_round8(self.value_size), b"\0") * possible_cpus()
        else:
            raw = bytes(value)
            if len(raw) != size:
                raise ValueError(f"{self.name}: value is {len(raw)} bytes, expected {size}")
        return ctypes.create_string_buffer(raw, max(size, 1))

    # -- elements ----------------------------------------------------------------------------------------
    def lookup(self, key: Key) -> bytes | None:
        """The value at ``key`` (all CPUs' slots for per-CPU maps), or None if there is none."""
        k = self._key(key)
        v = ctypes.create_string_buffer(max(self.user_value_size, 1))
        attr = MapElemAttr(map_fd=self.fileno(), key=addr(k), value=addr(v))
        ret, err = bpf_errno(Cmd.MAP_LOOKUP_ELEM, attr)
        if ret < 0:
            if err == errno.ENOENT:
                return None
            raise BPFError(err, Cmd.MAP_LOOKUP_ELEM, f"looking up a key in map {self.name!r}")
        return v.raw[: self.user_value_size]

    def lookup_int(self, key: Key, *, signed: bool = False) -> int | None:
        v = self.lookup(key)
        return None if v is None else int.from_bytes(v[: self.value_size], "little", signed=signed)

    def lookup_percpu(self, key: Key) -> list[bytes] | None:
        """For per-CPU maps: one ``value_size`` value per possible CPU."""
        if not self.percpu:
            raise TypeError(f"{self.name} is not a per-CPU map")
        v = self.lookup(key)
        if v is None:
            return None
        step = _round8(self.value_size)
        return [v[i * step : i * step + self.value_size] for i in range(possible_cpus())]

    def update(self, key: Key, value: Value, flags: int = UpdateFlags.ANY) -> None:
        k, v = self._key(key), self._value(value)
        attr = MapElemAttr(map_fd=self.fileno(), key=addr(k), value=addr(v), flags=int(flags))
        bpf(Cmd.MAP_UPDATE_ELEM, attr, f"updating an element of map {self.name!r}")

    def delete(self, key: Key) -> None:
        """Delete ``key``; ``KeyError`` if it is not there (arrays cannot delete: EINVAL)."""
        k = self._key(key)
        ret, err = bpf_errno(Cmd.MAP_DELETE_ELEM, MapElemAttr(map_fd=self.fileno(), key=addr(k)))
        if ret < 0:
            if err == errno.ENOENT:
                raise KeyError(key)
            raise BPFError(err, Cmd.MAP_DELETE_ELEM, f"deleting an element of map {self.name!r}")

    def next_key(self, key: Key | None) -> bytes | None:
        """The key after ``key`` (the first key when None); None at the end."""
        k = self._key(key) if key is not None else None
        nk = ctypes.create_string_buffer(max(self.key_size, 1))
        attr = MapElemAttr(map_fd=self.fileno(), key=addr(k), value=addr(nk))
        ret, err = bpf_errno(Cmd.MAP_GET_NEXT_KEY, attr)
        if ret < 0:
            if err == errno.ENOENT:
                return None
            raise BPFError(err, Cmd.MAP_GET_NEXT_KEY, f"iterating map {self.name!r}")
        return nk.raw[: self.key_size]

    def keys(self) -> Iterator[bytes]:
        """Iterate keys with GET_NEXT_KEY. Deleting the current key while iterating a hash map restarts
        the walk from the beginning (kernel behaviour), so collect first when deleting."""
        key = self.next_key(None)
        while key is not None:
            yield key
            key = self.next_key(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for k in self.keys():
            v = self.lookup(k)
            if v is not None:
                yield k, v

    def __getitem__(self, key: Key) -> bytes:
        v = self.lookup(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key: Key, value: Value) -> None:
        self.update(key, value)

    def __delitem__(self, key: Key) -> None:
        self.delete(key)

    def __contains__(self, key: Key) -> bool:
        return self.lookup(key) is not None

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    # -- whole-map operations ----------------------------------------------------------------------------
    def freeze(self) -> None:
        """BPF_MAP_FREEZE: no more writes from userspace; with RDONLY_PROG the verifier may read it as
        constants."""
        bpf(Cmd.MAP_FREEZE, MapElemAttr(map_fd=self.fileno()), f"freezing map {self.name!r}")

    def info(self) -> MapInfo:
        info = MapInfo()
        obj_get_info(self._fd, info)
        return info

    # -- PROG_ARRAY --------------------------------------------------------------------------------------
    def set_prog(self, index: int, prog: HasFileno | SupportsInt) -> None:
        """PROG_ARRAY: put a program (anything with ``fileno()``, or an fd int) at ``index``."""
        fd = fd_number(prog)
        self.update(index, fd.to_bytes(4, "little"))
