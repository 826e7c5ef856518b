"""The map half of the ELF reader: global data sections, ``.maps`` BTF definitions (with map-in-map inner maps
and initial slots), legacy ``maps`` (``struct bpf_map_def``) and ``extern`` variables (``.ksyms``, ``.kconfig``).

``MapReader`` is mixed into ``capsule.bpf.elf``'s reader and shares its state (the symbol table, the object's
BTF, the maps found so far); it is a separate module so that each half of the reader stays readable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from elftools.elf.constants import SH_FLAGS

from .btf import BTF, BTFError
from .btf_types import Array, Datasec, Enum, FuncProto, Int, IntEncoding, Ptr, Struct, Var, Void
from .elf_format import SHN_UNDEF
from .spec import ExternVar, KconfigVar, MapSpec, ProgramSpec
from .uapi import MAP_IN_MAP_TYPES, MapFlags, MapType

__all__ = ["MapReader", "Sym", "DATA_PREFIXES"]

DATA_PREFIXES = (".data", ".rodata", ".bss")


@dataclass
class Sym:
    """One ELF symbol, as the reader needs it."""

    name: str
    value: int
    size: int
    type: str  # STT_*
    bind: str  # STB_*
    shndx: int  # 0 for undefined, or a special value name turned into -1


class MapReader:
    """Reads maps and externs into ``self.maps`` / ``self.externs``; the reader provides the state below."""

    sections: list[Any]  # pyelftools sections, by index
    names: list[str]
    syms: list[Sym]
    btf: BTF | None
    maps: dict[str, MapSpec]
    map_at: dict[int, dict[int, str]]  # .maps / maps section index -> offset -> map name
    externs: dict[str, ExternVar]  # by name, for undefined symbols that BTF declares
    data_secs: dict[int, str]  # section index -> map name

    def err(self, msg: str) -> Exception:
        raise NotImplementedError

    def _read_data_sections(self) -> None:
        for idx, sec in enumerate(self.sections):
            name = sec.name
            if not any(name == p or name.startswith(p + ".") for p in DATA_PREFIXES):
                continue
            if (
                sec["sh_type"] not in ("SHT_PROGBITS", "SHT_NOBITS")
                or not sec["sh_flags"] & SH_FLAGS.SHF_ALLOC
            ):
                continue
            size = sec["sh_size"]
            if size == 0:
                continue
            rodata = name.startswith(".rodata")
            contents = bytes(size) if sec["sh_type"] == "SHT_NOBITS" else sec.data()
            value_id = 0
            if self.btf is not None:
                ids = self.btf.find_ids(name, Datasec.kind)
                value_id = ids[0] if ids else 0
            flags = MapFlags.MMAPABLE | (MapFlags.RDONLY_PROG if rodata else 0)
            self.maps[name] = MapSpec(
                name,
                MapType.ARRAY,
                4,
                size,
                1,
                flags,
                btf_value_type_id=value_id,
                contents=contents,
                freeze=rodata,
                section=name,
            )
            self.data_secs[idx] = name

    def _read_btf_maps(self) -> None:
        if ".maps" not in self.names:
            return
        idx = self.names.index(".maps")
        at = self.map_at.setdefault(idx, {})
        for s in self.syms:
            if s.shndx == idx and s.type == "STT_OBJECT":
                at[s.value] = s.name
        if self.btf is None:
            raise self.err(".maps section without .BTF: BTF-defined maps need the object's BTF")
        try:
            sec = self.btf.find(".maps", Datasec.kind)
        except BTFError:
            raise self.err(".maps section has no DATASEC in .BTF") from None
        assert isinstance(sec, Datasec)
        for vs in sec.vars:
            var = self.btf.type_by_id(vs.type)
            if not isinstance(var, Var):
                raise self.err(f".maps DATASEC entry {vs.type} is not a VAR")
            self.maps[var.name] = self._map_from_btf(var)

    def _map_from_btf(self, var: Var) -> MapSpec:
        btf = self.btf
        assert btf is not None
        d = btf.resolve(var.type)
        if not isinstance(d, Struct):
            raise self.err(f"map {var.name!r}: definition is not a struct")
        return self._map_def(var.name, d, inner=False)

    def _map_def(self, name: str, d: Struct, inner: bool) -> MapSpec:
        """One BTF map definition (``struct { __uint(type, ...); __type(key, ...); ... }``)."""
        btf = self.btf
        assert btf is not None
        vals: dict[str, int] = {}
        key_id = value_id = 0
        inner_spec: MapSpec | None = None
        for i, m in enumerate(d.members):
            if m.name in ("key", "value"):
                p = btf.resolve(m.type)
                if not isinstance(p, Ptr):
                    raise self.err(f"map {name!r}: {m.name} must be declared with __type()")
                tid = p.type
                if m.name == "key":
                    key_id = tid
                else:
                    value_id = tid
                vals[m.name + "_size"] = btf.size_of(tid)
            elif m.name == "values":
                if i != len(d.members) - 1:
                    raise self.err(f"map {name!r}: 'values' must be the last member")
                inner_spec = self._map_values(name, vals.get("type"), m.type, inner)
                if vals.get("value_size", 4) != 4:
                    raise self.err(f"map {name!r}: value size {vals['value_size']} conflicts with 'values' (4)")
                vals["value_size"], value_id = 4, 0
            else:
                vals[m.name] = self._map_int(name, m.name, m.type)
        if "type" not in vals:
            raise self.err(f"map {name!r}: no map type (__uint(type, ...))")
        return MapSpec(
            name=name,
            type=MapType(vals["type"]),
            key_size=vals.get("key_size", 0),
            value_size=vals.get("value_size", 0),
            max_entries=vals.get("max_entries", 0),
            flags=vals.get("map_flags", 0),
            map_extra=vals.get("map_extra", 0),
            btf_key_type_id=key_id,
            btf_value_type_id=value_id,
            inner=inner_spec,
        )

    def _map_values(self, name: str, map_type: int | None, tid: int, inner: bool) -> MapSpec | None:
        """``__array(values, ...)``: the inner map definition of a map-in-map (None for a program array)."""
        assert self.btf is not None
        if inner:
            raise self.err(f"map {name!r}: an inner map cannot itself hold maps")
        if map_type not in (*MAP_IN_MAP_TYPES, MapType.PROG_ARRAY):
            raise self.err(f"map {name!r}: 'values' is only for map-in-map and program-array maps")
        a = self.btf.resolve(tid)
        if not isinstance(a, Array) or a.nelems:
            raise self.err(f"map {name!r}: 'values' is not a zero-sized array (__array(values, ...))")
        p = self.btf.resolve(a.type)
        target = self.btf.resolve(p.type) if isinstance(p, Ptr) else None
        if map_type == MapType.PROG_ARRAY:
            if not isinstance(target, FuncProto):
                raise self.err(f"map {name!r}: program-array values must be function pointers")
            return None
        if not isinstance(target, Struct):
            raise self.err(f"map {name!r}: map-in-map values must point to an inner map definition")
        return self._map_def(f"{name}.inner", target, inner=True)

    def _read_map_slots(self, programs: dict[str, ProgramSpec]) -> None:
        """Initial slots of map-in-maps and program arrays: relocations in ``.maps`` at ``values[i]``."""
        if ".maps" not in self.names or self.btf is None:
            return
        idx = self.names.index(".maps")
        ds = self.btf.find(".maps", Datasec.kind)
        assert isinstance(ds, Datasec)
        spans = []  # (offset, size, map name, offset of 'values' in the definition)
        for vs in ds.vars:
            var = self.btf.type_by_id(vs.type)
            d = self.btf.resolve(var.type) if isinstance(var, Var) else None
            if isinstance(var, Var) and isinstance(d, Struct) and d.members and d.members[-1].name == "values":
                bits = d.members[-1].offset & 0xFFFFFF if d.kind_flag else d.members[-1].offset
                spans.append((vs.offset, vs.size, var.name, bits // 8))
        for r, sym in self._relocations_of(idx):
            hit = [s for s in spans if s[0] <= r < s[0] + s[1]]
            if not hit:
                raise self.err(f".maps+{r}: relocation outside the 'values' of any map")
            off, _, name, values_off = hit[0]
            slot, rem = divmod(r - off - values_off, 8)
            if slot < 0 or rem:
                raise self.err(f"map {name!r}: relocation at .maps+{r} is not a 'values' slot")
            m = self.maps[name]
            if m.type == MapType.PROG_ARRAY:
                if sym.type != "STT_FUNC" or sym.name not in programs:
                    raise self.err(f"map {name!r}: slot {slot} refers to {sym.name!r}, which is not a program")
            elif sym.name not in self.maps or sym.shndx != idx:
                raise self.err(f"map {name!r}: slot {slot} refers to {sym.name!r}, which is not a map")
            if m.max_entries and slot >= m.max_entries:
                raise self.err(f"map {name!r}: slot {slot} is beyond max_entries {m.max_entries}")
            m.init_refs[slot] = sym.name

    def _relocations_of(self, target: int) -> list[tuple[int, Sym]]:
        """(offset, symbol) of every relocation applied to section ``target``."""
        out = []
        for sec in self.sections:
            if sec["sh_type"] in ("SHT_REL", "SHT_RELA") and sec["sh_info"] == target:
                for r in sec.iter_relocations():
                    if r["r_info_type"] != 0:
                        out.append((r["r_offset"], self.syms[r["r_info_sym"]]))
        return out

    def _read_legacy_maps(self) -> None:
        """The ``maps`` section of old objects: one ``struct bpf_map_def`` per symbol (type, key_size, value_size,
        max_entries, map_flags as u32s; loaders added fields after these, which must be 0 here)."""
        if "maps" not in self.names:
            return
        idx = self.names.index("maps")
        sec = self.sections[idx]
        syms = sorted(
            (s for s in self.syms if s.shndx == idx and s.name and s.type in ("STT_OBJECT", "STT_NOTYPE")),
            key=lambda s: s.value,
        )
        if not syms:
            return
        size = sec["sh_size"]
        if size % len(syms):
            raise self.err(f"maps: section of {size} bytes does not divide into {len(syms)} map definitions")
        def_size = size // len(syms)
        if def_size < 16 or def_size % 4:
            raise self.err(f"maps: map definitions of {def_size} bytes are not struct bpf_map_def")
        data = bytes(size) if sec["sh_type"] == "SHT_NOBITS" else sec.data()
        at = self.map_at.setdefault(idx, {})
        for s in syms:
            if s.value % def_size or s.value + def_size > size:
                raise self.err(f"maps: map {s.name!r} at offset {s.value} is not one of its {def_size}-byte slots")
            if s.name in self.maps:
                raise self.err(f"maps: map {s.name!r} is defined twice")
            words = struct.unpack_from(f"<{def_size // 4}I", data, s.value)
            for k, w in enumerate(words[5:], start=5):
                if w:
                    raise self.err(
                        f"maps: map {s.name!r} sets field #{k} (offset {4 * k}) to {w}; only type, key_size, "
                        "value_size, max_entries and map_flags of struct bpf_map_def are supported"
                    )
            mtype, key_size, value_size, max_entries = words[:4]
            flags = words[4] if len(words) > 4 else 0
            self.maps[s.name] = MapSpec(s.name, mtype, key_size, value_size, max_entries, flags)
            at[s.value] = s.name

    def _read_externs(self) -> None:
        """Extern variables declared in the ``.ksyms`` / ``.kconfig`` DATASECs; the latter get a ``.kconfig``
        map (laid out here; the loader fills it from the running kernel and freezes it)."""
        if self.btf is None:
            return
        weak = {s.name for s in self.syms if s.shndx == SHN_UNDEF and s.bind == "STB_WEAK"}
        kconfig: list[KconfigVar] = []
        off = 0
        for secname in (".ksyms", ".kconfig"):
            for dsid in self.btf.find_ids(secname, Datasec.kind):
                ds = self.btf.type_by_id(dsid)
                assert isinstance(ds, Datasec)
                for vs in ds.vars:
                    var = self.btf.type_by_id(vs.type)
                    if not isinstance(var, Var):
                        continue  # kfunc declarations
                    if secname == ".ksyms":
                        typeless = isinstance(self.btf.resolve(var.type), Void)
                        self.externs[var.name] = ExternVar(var.name, "kallsyms" if typeless else "ksym",
                                                           var.name in weak)
                        continue
                    size, kind = self._kconfig_kind(var)
                    align = 1 if kind == "char_array" else size
                    off = (off + align - 1) // align * align
                    kconfig.append(KconfigVar(var.name, off, size, kind, var.name in weak))
                    self.externs[var.name] = ExternVar(var.name, "kconfig", var.name in weak, off)
                    off += size
        if kconfig:
            self.maps[".kconfig"] = MapSpec(
                ".kconfig", MapType.ARRAY, 4, (off + 7) // 8 * 8, 1, MapFlags.MMAPABLE | MapFlags.RDONLY_PROG,
                contents=bytes((off + 7) // 8 * 8), freeze=True, kconfig=kconfig,
            )

    def _kconfig_kind(self, var: Var) -> tuple[int, str]:
        assert self.btf is not None
        t = self.btf.resolve(var.type)
        size = self.btf.size_of(var.type)
        if isinstance(t, Int):
            if t.encoding & IntEncoding.BOOL:
                return size, "bool"
            if size == 1:  # libbpf: any 1-byte int holds the option's letter (y, n, m) or a small number
                return size, "char"
            return size, "int" if t.encoding & IntEncoding.SIGNED else "uint"
        if isinstance(t, Enum):
            return size, "tristate" if t.name == "libbpf_tristate" else "int"
        if isinstance(t, Array) and self.btf.size_of(t.type) == 1:
            return size, "char_array"
        raise self.err(f"extern {var.name!r} (__kconfig): unsupported type")

    def _map_int(self, mapname: str, field_: str, tid: int) -> int:
        """``__uint(x, N)`` is ``int (*x)[N]``; ``__ulong(x, N)`` an enum whose one value is N."""
        assert self.btf is not None
        t = self.btf.resolve(tid)
        if isinstance(t, Ptr):
            a = self.btf.resolve(t.type)
            if isinstance(a, Array):
                return a.nelems
        if isinstance(t, Enum) and t.values:
            return t.values[0].value
        raise self.err(f"map {mapname!r}: field {field_!r} is not an integer definition")
