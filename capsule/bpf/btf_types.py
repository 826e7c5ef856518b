"""BTF type kinds as Python objects, and their binary encoding (include/uapi/linux/btf.h).

Every type refers to others by numeric id (as the binary format and libbpf do), not by object: ids are what
func_info, map definitions and the kernel speak, and keeping them makes parse/encode an exact round trip and
lets a 100k-type vmlinux be decoded lazily, one type at a time.

A record on disk is ``struct btf_type {u32 name_off; u32 info; u32 size_or_type;}`` followed by kind-specific
data; ``info`` packs vlen (bits 0-15), kind (bits 24-28) and kind_flag (bit 31).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Protocol

from capsule.ints import signed

_HDR = struct.Struct("<III")
_U32 = struct.Struct("<I")
_2U32 = struct.Struct("<II")
_3U32 = struct.Struct("<III")
_I32 = struct.Struct("<i")


class Kind(IntEnum):
    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


class IntEncoding:
    SIGNED = 1
    CHAR = 2
    BOOL = 4


class Linkage(IntEnum):
    """FUNC linkage (vlen of a FUNC) and VAR linkage share these numbers."""

    STATIC = 0
    GLOBAL = 1
    EXTERN = 2


class Strings(Protocol):
    def get(self, off: int) -> str: ...

    def add(self, s: str) -> int: ...


class Type:
    """Base of all BTF types. ``kind_flag`` is kept raw so that round trips are exact."""

    kind: ClassVar[Kind] = Kind.UNKN
    name: str
    kind_flag: int


@dataclass(slots=True)
class Void(Type):
    """Type id 0. Never encoded."""

    kind: ClassVar[Kind] = Kind.UNKN
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Int(Type):
    kind: ClassVar[Kind] = Kind.INT
    name: str
    size: int
    bits: int = 0  # 0 means size * 8
    encoding: int = 0  # IntEncoding flags
    offset: int = 0  # bit offset, always 0 from modern compilers
    kind_flag: int = 0

    def __post_init__(self) -> None:
        if not self.bits:
            self.bits = self.size * 8

    @property
    def signed(self) -> bool:
        return bool(self.encoding & IntEncoding.SIGNED)


@dataclass(slots=True)
class Ptr(Type):
    kind: ClassVar[Kind] = Kind.PTR
    type: int
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Array(Type):
    kind: ClassVar[Kind] = Kind.ARRAY
    type: int
    index_type: int
    nelems: int
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Member:
    """A struct/union member. ``offset`` is the raw word: with the parent's kind_flag set it packs
    bitfield_size << 24 | bit_offset; without, it is the bit offset."""

    name: str
    type: int
    offset: int = 0


@dataclass(slots=True)
class Struct(Type):
    kind: ClassVar[Kind] = Kind.STRUCT
    name: str
    size: int
    members: list[Member] = field(default_factory=list)
    kind_flag: int = 0

    def bit_offset(self, m: Member) -> int:
        return m.offset & 0xFFFFFF if self.kind_flag else m.offset

    def bitfield_size(self, m: Member) -> int:
        return m.offset >> 24 if self.kind_flag else 0

    def member(self, name: str) -> Member | None:
        for m in self.members:
            if m.name == name:
                return m
        return None


@dataclass(slots=True)
class Union(Struct):
    kind: ClassVar[Kind] = Kind.UNION


@dataclass(slots=True)
class EnumValue:
    name: str
    value: int


@dataclass(slots=True)
class Enum(Type):
    """ENUM (32-bit values). kind_flag set means the values are signed."""

    kind: ClassVar[Kind] = Kind.ENUM
    name: str
    size: int = 4
    values: list[EnumValue] = field(default_factory=list)
    kind_flag: int = 0


@dataclass(slots=True)
class Enum64(Enum):
    kind: ClassVar[Kind] = Kind.ENUM64
    size: int = 8


@dataclass(slots=True)
class Fwd(Type):
    """Forward declaration; kind_flag 1 means union, 0 struct."""

    kind: ClassVar[Kind] = Kind.FWD
    name: str
    kind_flag: int = 0


@dataclass(slots=True)
class Typedef(Type):
    kind: ClassVar[Kind] = Kind.TYPEDEF
    name: str
    type: int
    kind_flag: int = 0


@dataclass(slots=True)
class Volatile(Type):
    kind: ClassVar[Kind] = Kind.VOLATILE
    type: int
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Const(Type):
    kind: ClassVar[Kind] = Kind.CONST
    type: int
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Restrict(Type):
    kind: ClassVar[Kind] = Kind.RESTRICT
    type: int
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Func(Type):
    """A function: ``type`` is its FUNC_PROTO, ``linkage`` is stored in vlen."""

    kind: ClassVar[Kind] = Kind.FUNC
    name: str
    type: int
    linkage: int = Linkage.STATIC
    kind_flag: int = 0


@dataclass(slots=True)
class Param:
    name: str
    type: int


@dataclass(slots=True)
class FuncProto(Type):
    kind: ClassVar[Kind] = Kind.FUNC_PROTO
    ret: int
    params: list[Param] = field(default_factory=list)
    name: str = ""
    kind_flag: int = 0


@dataclass(slots=True)
class Var(Type):
    kind: ClassVar[Kind] = Kind.VAR
    name: str
    type: int
    linkage: int = Linkage.GLOBAL
    kind_flag: int = 0


@dataclass(slots=True)
class VarSecinfo:
    type: int
    offset: int
    size: int


@dataclass(slots=True)
class Datasec(Type):
    kind: ClassVar[Kind] = Kind.DATASEC
    name: str
    size: int = 0
    vars: list[VarSecinfo] = field(default_factory=list)
    kind_flag: int = 0


@dataclass(slots=True)
class Float(Type):
    kind: ClassVar[Kind] = Kind.FLOAT
    name: str
    size: int
    kind_flag: int = 0


@dataclass(slots=True)
class DeclTag(Type):
    """A tag on a type, or (component_idx >= 0) on one of its members/params."""

    kind: ClassVar[Kind] = Kind.DECL_TAG
    name: str
    type: int
    component_idx: int = -1
    kind_flag: int = 0


@dataclass(slots=True)
class TypeTag(Type):
    kind: ClassVar[Kind] = Kind.TYPE_TAG
    name: str
    type: int
    kind_flag: int = 0


# kinds whose third header word is a type id (the rest use it as a size or not at all)
REF_KINDS = (Ptr, Typedef, Volatile, Const, Restrict, Func, Var, DeclTag, TypeTag)
MODIFIERS = (Typedef, Volatile, Const, Restrict, TypeTag)


def record_size(kind: int, vlen: int) -> int:
    """Bytes taken by one type record of this kind (header included); -1 for an unknown kind."""
    if kind in (Kind.INT, Kind.VAR, Kind.DECL_TAG):
        return 16
    if kind == Kind.ARRAY:
        return 24
    if kind in (Kind.STRUCT, Kind.UNION, Kind.ENUM64, Kind.DATASEC):
        return 12 + 12 * vlen
    if kind in (Kind.ENUM, Kind.FUNC_PROTO):
        return 12 + 8 * vlen
    if kind in (
        Kind.PTR,
        Kind.FWD,
        Kind.TYPEDEF,
        Kind.VOLATILE,
        Kind.CONST,
        Kind.RESTRICT,
        Kind.FUNC,
        Kind.FLOAT,
        Kind.TYPE_TAG,
    ):
        return 12
    return -1


def decode_type(buf: bytes | memoryview, off: int, strings: Strings) -> Type:
    """Decode the type record at ``off`` (its length is known from ``record_size``)."""
    name_off, info, st = _HDR.unpack_from(buf, off)
    name = strings.get(name_off) if name_off else ""
    vlen, kind, kf = info & 0xFFFF, (info >> 24) & 0x1F, info >> 31
    p = off + 12
    if kind == Kind.INT:
        (word,) = _U32.unpack_from(buf, p)
        return Int(name, st, word & 0xFF, word >> 24 & 0xF, word >> 16 & 0xFF, kf)
    if kind == Kind.PTR:
        return Ptr(st, name, kf)
    if kind == Kind.ARRAY:
        t, it, n = _3U32.unpack_from(buf, p)
        return Array(t, it, n, name, kf)
    if kind in (Kind.STRUCT, Kind.UNION):
        members = []
        for i in range(vlen):
            mn, mt, mo = _3U32.unpack_from(buf, p + 12 * i)
            members.append(Member(strings.get(mn) if mn else "", mt, mo))
        return (Struct if kind == Kind.STRUCT else Union)(name, st, members, kf)
    if kind == Kind.ENUM:
        vals = []
        for i in range(vlen):
            vn, v = _2U32.unpack_from(buf, p + 8 * i)
            if kf:
                v = signed(v, 32)
            vals.append(EnumValue(strings.get(vn), v))
        return Enum(name, st, vals, kf)
    if kind == Kind.ENUM64:
        vals = []
        for i in range(vlen):
            vn, lo, hi = _3U32.unpack_from(buf, p + 12 * i)
            v = lo | hi << 32
            if kf:
                v = signed(v, 64)
            vals.append(EnumValue(strings.get(vn), v))
        return Enum64(name, st, vals, kf)
    if kind == Kind.FWD:
        return Fwd(name, kf)
    if kind == Kind.TYPEDEF:
        return Typedef(name, st, kf)
    if kind == Kind.VOLATILE:
        return Volatile(st, name, kf)
    if kind == Kind.CONST:
        return Const(st, name, kf)
    if kind == Kind.RESTRICT:
        return Restrict(st, name, kf)
    if kind == Kind.FUNC:
        return Func(name, st, vlen, kf)
    if kind == Kind.FUNC_PROTO:
        params = []
        for i in range(vlen):
            pn, pt = _2U32.unpack_from(buf, p + 8 * i)
            params.append(Param(strings.get(pn) if pn else "", pt))
        return FuncProto(st, params, name, kf)
    if kind == Kind.VAR:
        return Var(name, st, _U32.unpack_from(buf, p)[0], kf)
    if kind == Kind.DATASEC:
        return Datasec(name, st, [VarSecinfo(*_3U32.unpack_from(buf, p + 12 * i)) for i in range(vlen)], kf)
    if kind == Kind.FLOAT:
        return Float(name, st, kf)
    if kind == Kind.DECL_TAG:
        return DeclTag(name, st, _I32.unpack_from(buf, p)[0], kf)
    if kind == Kind.TYPE_TAG:
        return TypeTag(name, st, kf)
    raise ValueError(f"unknown BTF kind {kind} at type section offset {off}")


def _hdr(strings: Strings, t: Type, vlen: int, third: int) -> bytes:
    name_off = strings.add(t.name) if t.name else 0
    return _HDR.pack(name_off, (t.kind_flag & 1) << 31 | (int(t.kind) & 0x1F) << 24 | (vlen & 0xFFFF), third)


def encode_type(t: Type, strings: Strings) -> bytes:
    """Encode one type record; names are added to ``strings``."""
    if isinstance(t, Int):
        word = (t.encoding & 0xF) << 24 | (t.offset & 0xFF) << 16 | (t.bits & 0xFF)
        return _hdr(strings, t, 0, t.size) + _U32.pack(word)
    if isinstance(t, Array):
        return _hdr(strings, t, 0, 0) + _3U32.pack(t.type, t.index_type, t.nelems)
    if isinstance(t, Struct):  # and Union
        body = b"".join(_3U32.pack(strings.add(m.name) if m.name else 0, m.type, m.offset) for m in t.members)
        return _hdr(strings, t, len(t.members), t.size) + body
    if isinstance(t, Enum64):
        body = b"".join(
            _3U32.pack(strings.add(v.name), v.value & 0xFFFFFFFF, (v.value >> 32) & 0xFFFFFFFF)
            for v in t.values
        )
        return _hdr(strings, t, len(t.values), t.size) + body
    if isinstance(t, Enum):
        body = b"".join(_2U32.pack(strings.add(v.name), v.value & 0xFFFFFFFF) for v in t.values)
        return _hdr(strings, t, len(t.values), t.size) + body
    if isinstance(t, Fwd):
        return _hdr(strings, t, 0, 0)
    if isinstance(t, Func):
        return _hdr(strings, t, t.linkage, t.type)
    if isinstance(t, FuncProto):
        body = b"".join(_2U32.pack(strings.add(p.name) if p.name else 0, p.type) for p in t.params)
        return _hdr(strings, t, len(t.params), t.ret) + body
    if isinstance(t, Var):
        return _hdr(strings, t, 0, t.type) + _U32.pack(t.linkage)
    if isinstance(t, Datasec):
        body = b"".join(_3U32.pack(v.type, v.offset, v.size) for v in t.vars)
        return _hdr(strings, t, len(t.vars), t.size) + body
    if isinstance(t, Float):
        return _hdr(strings, t, 0, t.size)
    if isinstance(t, DeclTag):
        return _hdr(strings, t, 0, t.type) + _I32.pack(t.component_idx)
    if isinstance(t, (Ptr, Typedef, Volatile, Const, Restrict, TypeTag)):
        return _hdr(strings, t, 0, t.type)
    raise TypeError(f"cannot encode {t!r}")


def referenced_ids(t: Type) -> list[int]:
    """Every type id ``t`` points at (used for copying type graphs between BTFs)."""
    if isinstance(t, REF_KINDS):
        return [t.type]
    if isinstance(t, Array):
        return [t.type, t.index_type]
    if isinstance(t, Struct):
        return [m.type for m in t.members]
    if isinstance(t, FuncProto):
        return [t.ret] + [p.type for p in t.params]
    if isinstance(t, Datasec):
        return [v.type for v in t.vars]
    return []
