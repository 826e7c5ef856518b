"""BTF: the BPF Type Format blob (``.BTF`` in objects, ``/sys/kernel/btf/vmlinux`` in the kernel).

``BTF.parse`` reads a blob, ``BTF.encode`` writes it back (byte-identical for compiler output), ``find`` /
``type_by_id`` / ``resolve`` / ``size_of`` answer questions, the ``add_*`` builder methods let writers make
new types and get their ids, and ``for_kernel`` applies the fix-ups libbpf makes before ``BPF_BTF_LOAD``.

Types are decoded lazily: parsing only records where each record starts, so finding one kfunc in the
~100k-type vmlinux BTF costs one pass over the headers plus a name index, not 100k Python objects.
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Iterator

from .btf_types import (
    MODIFIERS,
    Array,
    Const,
    Datasec,
    DeclTag,
    Enum,
    Float,
    Func,
    FuncProto,
    Fwd,
    Int,
    IntEncoding,
    Kind,
    Linkage,
    Member,
    Param,
    Ptr,
    Struct,
    Type,
    Typedef,
    Union,
    Var,
    VarSecinfo,
    Void,
    Volatile,
    decode_type,
    encode_type,
    record_size,
    referenced_ids,
)

__all__ = ["BTF", "BTFError", "StringTable", "Kind", "Linkage", "IntEncoding", "VMLINUX"]

MAGIC = 0xEB9F
VERSION = 1
_HEADER = struct.Struct("<HBBIIIII")
VMLINUX = "/sys/kernel/btf/vmlinux"


class BTFError(ValueError):
    """Malformed BTF, or a lookup that cannot be answered."""


class StringTable:
    """The BTF string section: NUL-terminated names addressed by byte offset.

    The original bytes are kept so encoding reproduces them exactly (``.BTF.ext`` line_info points into them);
    new strings are appended, and an existing string is reused rather than duplicated.
    """

    def __init__(self, data: bytes = b"\0") -> None:
        if not data or data[0] != 0:
            raise BTFError("string section must start with an empty string")
        self._data = bytearray(data)
        self._cache: dict[int, str] = {0: ""}
        self._index: dict[str, int] | None = None

    def get(self, off: int) -> str:
        s = self._cache.get(off)
        if s is None:
            end = self._data.find(0, off)
            if off >= len(self._data) or end < 0:
                raise BTFError(f"string offset {off} outside the string section ({len(self._data)} bytes)")
            s = self._data[off:end].decode("utf-8", "replace")
            self._cache[off] = s
        return s

    def _build_index(self) -> dict[str, int]:
        idx: dict[str, int] = {}
        off, data = 0, bytes(self._data)
        for piece in data.split(b"\0")[:-1]:
            s = piece.decode("utf-8", "replace")
            idx.setdefault(s, off)
            off += len(piece) + 1
        return idx

    def add(self, s: str) -> int:
        if self._index is None:
            self._index = self._build_index()
        off = self._index.get(s)
        if off is None:
            off = len(self._data)
            self._data += s.encode() + b"\0"
            self._index[s] = off
            self._cache[off] = s
        return off

    def find(self, s: str) -> int | None:
        if self._index is None:
            self._index = self._build_index()
        return self._index.get(s)

    def __bytes__(self) -> bytes:
        return bytes(self._data)

    def __len__(self) -> int:
        return len(self._data)


class BTF:
    """A BTF type graph. Type id 0 is ``void``; ids of parsed types match the blob's."""

    def __init__(self, strings: StringTable | None = None) -> None:
        self.strings = strings or StringTable()
        self._types: list[Type | None] = [Void()]
        self._raw: bytes = b""
        self._offsets: list[int] = [0]  # record offset per id into _raw, -1 for types added later
        self._names: dict[str, list[int]] | None = None
        self.flags = 0

    # -- parsing / encoding -----------------------------------------------------------------------------
    @classmethod
    def parse(cls, data: bytes) -> BTF:
        if len(data) < _HEADER.size:
            raise BTFError(f"BTF blob too short ({len(data)} bytes)")
        magic, version, flags, hdr_len, type_off, type_len, str_off, str_len = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise BTFError(f"bad BTF magic 0x{magic:04x}")
        if version != VERSION:
            raise BTFError(f"unsupported BTF version {version}")
        tstart, sstart = hdr_len + type_off, hdr_len + str_off
        if tstart + type_len > len(data) or sstart + str_len > len(data):
            raise BTFError("BTF sections extend past the end of the blob")
        btf = cls(StringTable(data[sstart : sstart + str_len]))
        btf.flags = flags
        raw = bytes(data[tstart : tstart + type_len])
        btf._raw = raw
        info_at = struct.Struct("<I").unpack_from
        offsets = btf._offsets
        off = 0
        while off < type_len:
            if off + 12 > type_len:
                raise BTFError(f"truncated type record at offset {off}")
            (info,) = info_at(raw, off + 4)
            size = record_size((info >> 24) & 0x1F, info & 0xFFFF)
            if size < 0:
                raise BTFError(f"unknown BTF kind {(info >> 24) & 0x1F} for type id {len(offsets)}")
            offsets.append(off)
            off += size
        if off != type_len:
            raise BTFError("last type record runs past the type section")
        btf._types.extend([None] * (len(offsets) - 1))
        return btf

    @classmethod
    def load_vmlinux(cls, path: str = VMLINUX) -> BTF:
        with open(path, "rb") as f:
            return cls.parse(f.read())

    def encode(self) -> bytes:
        types = b"".join(encode_type(t, self.strings) for t in self.iter_types())
        strs = bytes(self.strings)
        hdr = _HEADER.pack(MAGIC, VERSION, self.flags, _HEADER.size, 0, len(types), len(types), len(strs))
        return hdr + types + strs

    # -- access ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of type ids, void included (the next new id)."""
        return len(self._types)

    def type_by_id(self, tid: int) -> Type:
        if not 0 <= tid < len(self._types):
            raise BTFError(f"type id {tid} out of range (0..{len(self._types) - 1})")
        t = self._types[tid]
        if t is None:
            try:
                t = decode_type(self._raw, self._offsets[tid], self.strings)
            except (struct.error, ValueError) as e:
                raise BTFError(f"type id {tid}: {e}") from None
            self._types[tid] = t
        return t

    __getitem__ = type_by_id

    def check_references(self) -> None:
        """Raise ``BTFError`` for a type that refers to a type id this BTF does not have. A reader of a foreign
        object calls it once, so that a malformed blob is refused where it is read, not wherever one of its
        types is first followed."""
        n = len(self._types)
        for tid in range(1, n):
            t = self.type_by_id(tid)
            for ref in referenced_ids(t):
                if not 0 <= ref < n:
                    raise BTFError(f"type id {tid} ({t.kind.name} {t.name!r}) refers to type id {ref}, which does "
                                   f"not exist (ids 0..{n - 1})")

    def iter_types(self) -> Iterator[Type]:
        """Every type from id 1 on, in id order."""
        for tid in range(1, len(self._types)):
            yield self.type_by_id(tid)

    def items(self) -> Iterator[tuple[int, Type]]:
        for tid in range(1, len(self._types)):
            yield tid, self.type_by_id(tid)

    def name_of(self, tid: int) -> str:
        """The name of a type without decoding the whole record."""
        t = self._types[tid]
        if t is not None:
            return t.name
        (name_off,) = struct.unpack_from("<I", self._raw, self._offsets[tid])
        return self.strings.get(name_off) if name_off else ""

    def kind_of(self, tid: int) -> Kind:
        t = self._types[tid]
        if t is not None:
            return t.kind
        (info,) = struct.unpack_from("<I", self._raw, self._offsets[tid] + 4)
        return Kind((info >> 24) & 0x1F)

    def _name_index(self) -> dict[str, list[int]]:
        if self._names is None:
            idx: dict[str, list[int]] = {}
            raw, strings, u32 = self._raw, self.strings, struct.Struct("<I").unpack_from
            for tid in range(1, len(self._types)):
                t = self._types[tid]
                if t is not None:
                    name = t.name
                else:
                    (name_off,) = u32(raw, self._offsets[tid])
                    if not name_off:
                        continue
                    name = strings.get(name_off)
                if name:
                    idx.setdefault(name, []).append(tid)
            self._names = idx
        return self._names

    def find_ids(self, name: str, kind: Kind | None = None) -> list[int]:
        return [i for i in self._name_index().get(name, ()) if kind is None or self.kind_of(i) == kind]

    def find_id(self, name: str, kind: Kind | None = None) -> int:
        """The id of the first type called ``name`` (of ``kind``); BTFError when there is none."""
        ids = self.find_ids(name, kind)
        if not ids:
            what = f"{kind.name} " if kind is not None else ""
            raise BTFError(f"no BTF {what}type named {name!r}")
        return ids[0]

    def find(self, name: str, kind: Kind | None = None) -> Type:
        return self.type_by_id(self.find_id(name, kind))

    def skip_modifiers(self, tid: int) -> int:
        """Follow typedef/const/volatile/restrict/type_tag to the underlying type id."""
        for _ in range(64):
            t = self.type_by_id(tid)
            if not isinstance(t, MODIFIERS):
                return tid
            tid = t.type
        raise BTFError(f"modifier chain too long at type id {tid}")

    def resolve(self, tid: int) -> Type:
        return self.type_by_id(self.skip_modifiers(tid))

    def size_of(self, tid: int) -> int:
        """Byte size of a type (as sizeof in C); BTFError for types without a size (void, func)."""
        t = self.resolve(tid)
        if isinstance(t, (Int, Struct, Enum, Datasec, Float)):
            return t.size
        if isinstance(t, Ptr):
            return 8
        if isinstance(t, Array):
            return t.nelems * self.size_of(t.type)
        if isinstance(t, Var):
            return self.size_of(t.type)
        raise BTFError(f"type id {tid} ({t.kind.name}) has no size")

    def copy(self) -> BTF:
        """A deep copy that can be changed without touching this one."""
        other = BTF(StringTable(bytes(self.strings)))
        other._types = [copy.deepcopy(t) for t in self._types]
        other._raw, other._offsets, other.flags = self._raw, list(self._offsets), self.flags
        return other

    # -- building -------------------------------------------------------------------------------------
    def add(self, t: Type) -> int:
        """Append a type; returns its id."""
        self._types.append(t)
        self._offsets.append(-1)
        if self._names is not None and t.name:
            self._names.setdefault(t.name, []).append(len(self._types) - 1)
        return len(self._types) - 1

    def add_int(
        self, name: str, size: int, signed: bool = False, char: bool = False, bool_: bool = False
    ) -> int:
        enc = (IntEncoding.SIGNED if signed else 0) | (IntEncoding.CHAR if char else 0)
        enc |= IntEncoding.BOOL if bool_ else 0
        return self.add(Int(name, size, size * 8, enc))

    def int_id(self, size: int, signed: bool = False) -> int:
        """An existing INT of this size and signedness, or a new one (named like the C type)."""
        for tid, t in self.items():
            if (
                isinstance(t, Int)
                and t.size == size
                and t.signed == signed
                and t.bits == size * 8
                and not t.encoding & (IntEncoding.CHAR | IntEncoding.BOOL)
            ):
                return tid
        names = {1: "char", 2: "short", 4: "int", 8: "long long", 16: "__int128"}
        base = names.get(size, f"__int{size * 8}")
        return self.add_int(base if signed else f"unsigned {base}", size, signed=signed)

    def add_ptr(self, target: int) -> int:
        return self.add(Ptr(target))

    def add_array(self, elem: int, nelems: int, index_type: int | None = None) -> int:
        if index_type is None:
            index_type = self.int_id(4)
        return self.add(Array(elem, index_type, nelems))

    def add_struct(
        self, name: str, size: int, members: list[tuple[str, int, int]], union: bool = False
    ) -> int:
        """``members`` are (name, type id, bit offset)."""
        ms = [Member(n, t, o) for n, t, o in members]
        return self.add(Union(name, size, ms) if union else Struct(name, size, ms))

    def add_enum(self, name: str, values: dict[str, int], size: int = 4) -> int:
        from .btf_types import EnumValue

        return self.add(Enum(name, size, [EnumValue(k, v) for k, v in values.items()]))

    def add_typedef(self, name: str, target: int) -> int:
        return self.add(Typedef(name, target))

    def add_const(self, target: int) -> int:
        return self.add(Const(target))

    def add_volatile(self, target: int) -> int:
        return self.add(Volatile(target))

    def add_fwd(self, name: str, union: bool = False) -> int:
        return self.add(Fwd(name, int(union)))

    def add_float(self, name: str, size: int) -> int:
        return self.add(Float(name, size))

    def add_func_proto(self, ret: int, params: list[tuple[str, int]]) -> int:
        return self.add(FuncProto(ret, [Param(n, t) for n, t in params]))

    def add_func(self, name: str, proto: int, linkage: int = Linkage.GLOBAL) -> int:
        return self.add(Func(name, proto, linkage))

    def add_var(self, name: str, target: int, linkage: int = Linkage.GLOBAL) -> int:
        return self.add(Var(name, target, linkage))

    def add_datasec(self, name: str, size: int, vars: list[tuple[int, int, int]]) -> int:
        """``vars`` are (VAR type id, offset, size)."""
        return self.add(Datasec(name, size, [VarSecinfo(*v) for v in vars]))

    def add_decl_tag(self, name: str, target: int, component_idx: int = -1) -> int:
        return self.add(DeclTag(name, target, component_idx))

    def copy_type(self, src: BTF, tid: int, memo: dict[int, int] | None = None) -> int:
        """Copy type ``tid`` of ``src`` (with everything it refers to) into this BTF; returns the new id.

        Structs and unions are copied without members (same name, size and kind): enough for libbpf's
        kfunc prototype compatibility check and for the kernel, and it keeps a copy out of vmlinux small.
        """
        memo = {} if memo is None else memo
        if tid == 0:
            return 0
        if tid in memo:
            return memo[tid]
        t = src.type_by_id(tid)
        if isinstance(t, Struct):  # Union too
            memo[tid] = self.add(type(t)(t.name, t.size, []))
            return memo[tid]
        new = copy.deepcopy(t)
        nid = self.add(new)
        memo[tid] = nid
        for attr in ("type", "index_type", "ret"):
            if hasattr(new, attr):
                setattr(new, attr, self.copy_type(src, getattr(new, attr), memo))
        if isinstance(new, FuncProto):
            for p in new.params:
                p.type = self.copy_type(src, p.type, memo)
        elif isinstance(new, Datasec):
            for vs in new.vars:
                vs.type = self.copy_type(src, vs.type, memo)
        return nid

    # -- kernel fix-ups -------------------------------------------------------------------------------
    def fixup_datasecs(self, section_sizes: dict[str, int], symbol_offsets: dict[str, int]) -> None:
        """Fill DATASEC sizes and VAR offsets that clang leaves 0, from the ELF (libbpf's btf_fixup_datasec).

        ``section_sizes`` maps ELF section names to sizes, ``symbol_offsets`` variable names to their symbol
        values. Vars are then sorted by offset, which the kernel requires.
        """
        for t in self.iter_types():
            if not isinstance(t, Datasec) or t.name in (".ksyms", ".kconfig"):
                continue
            if t.size == 0 and t.name in section_sizes:
                t.size = section_sizes[t.name]
                for vs in t.vars:
                    v = self.type_by_id(vs.type)
                    if isinstance(v, Var) and v.name in symbol_offsets:
                        vs.offset = symbol_offsets[v.name]
            t.vars.sort(key=lambda vs: vs.offset)

    def for_kernel(
        self, section_sizes: dict[str, int] | None = None, symbol_offsets: dict[str, int] | None = None
    ) -> bytes:
        """Encode a copy the kernel's BPF_BTF_LOAD accepts (what libbpf does to object BTF before loading).

        - DATASEC sizes / VAR offsets from the ELF, when given (``capsule.bpf.elf`` has already applied them).
        - Extern VARs (``.kconfig``/``.ksyms``) become allocated globals of an int type; the kernel refuses
          the extern linkage.
        - Params of FUNCs get names where clang left none (the kernel requires them).
        - Extern FUNCs (kfunc declarations) become global FUNCs, and their DATASEC entries
          point at a dummy int VAR instead: a DATASEC may only hold VARs, a FUNC may not be extern, and every
          param of a FUNC must be named.
        - The kernel refuses DATASECs without vars (``vlen == 0``); such a DATASEC becomes a member-less
          struct of the same size, which keeps every type id in place.
        """
        btf = self.copy()
        if section_sizes is not None or symbol_offsets is not None:
            btf.fixup_datasecs(section_sizes or {}, symbol_offsets or {})
        int_id = 0
        dummy = 0
        for tid in range(1, len(btf)):
            t = btf.type_by_id(tid)
            if isinstance(t, Var) and t.linkage not in (Linkage.STATIC, Linkage.GLOBAL):
                int_id = int_id or btf.int_id(4, signed=True)
                t.linkage, t.type = Linkage.GLOBAL, int_id
            elif isinstance(t, Func):
                # every param of a FUNC must be named; clang leaves them unnamed for extern declarations and
                # for __naked functions
                if t.linkage not in (Linkage.STATIC, Linkage.GLOBAL):
                    t.linkage = Linkage.GLOBAL
                proto = btf.type_by_id(t.type)
                if isinstance(proto, FuncProto):
                    for i, p in enumerate(proto.params):
                        if p.type and not p.name:
                            p.name = f"arg{i}"
        for tid in range(1, len(btf)):
            t = btf.type_by_id(tid)
            if not isinstance(t, Datasec):
                continue
            if not t.vars:
                btf._types[tid] = Struct(_ident(t.name), t.size, [])
                continue
            extern_sec = any(isinstance(btf.type_by_id(vs.type), Func) for vs in t.vars)
            if extern_sec:
                if not dummy:
                    int_id = int_id or btf.int_id(4, signed=True)
                    dummy = btf.add_var("dummy_ksym", int_id)
                for vs in t.vars:
                    if isinstance(btf.type_by_id(vs.type), Func):
                        vs.type = dummy
            if t.name in (".ksyms", ".kconfig") or extern_sec:
                for i, vs in enumerate(t.vars):
                    vs.offset, vs.size = 4 * i, 4
                t.size = 4 * len(t.vars)
        return btf.encode()


def _ident(name: str) -> str:
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return s if s and not s[0].isdigit() else "_" + s
