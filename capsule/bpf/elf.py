"""Read a standard BPF ELF object (clang's or libbpf-style output) into an ``ObjectSpec``.

What libbpf does between ``bpf_object__open`` and loading, minus talking to the kernel:

- every function in a non-``.text`` code section is a program; its section name gives the program type;
- ``.text`` holds subprograms (static and global); each program gets the subprograms it reaches appended after
  its entry function, BPF-to-BPF calls and function-address ``ld_imm64`` fixed to relative offsets, and the
  ``.BTF.ext`` func_info / line_info of every placed function moved along;
- ``ld_imm64`` of a map becomes ``src=MAP_FD, ref=<map>``, of a global variable ``src=MAP_VALUE,
  ref=<section>``, offset in the high word; calls to undefined (``__ksym``) functions become kfunc calls;
- ``.maps`` BTF map definitions (with the inner map of a map-in-map and the initial slots of map-in-maps and
  program arrays), legacy ``maps`` (``struct bpf_map_def``), ``.data``/``.rodata``/``.bss`` (and ``.data.*``
  etc.) become ``MapSpec``s;
- ``extern`` variables (``__ksym``, ``__kconfig``) stay symbolic (``ld_imm64 src=BTF_ID``), described in
  ``ProgramSpec.externs``; ``__kconfig`` ones get a ``.kconfig`` map the loader fills.

Everything that goes wrong raises ``ObjectError`` with a message that names the section, symbol or offset.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from capsule.ints import MASK32, signed

from .btf import BTF, BTFError
from .btf_ext import BTFExt
from .btf_types import Array, Datasec, Enum, FuncProto, Int, IntEncoding, Ptr, Struct, Var, Void
from .elf_format import EM_BPF, R_BPF_64_32, R_BPF_64_64, R_BPF_NONE, RELOC_NAMES, SHN_UNDEF
from .elf_sections import SectionType, section_type
from .insn import SLOT, DecodeError, Insn, decode
from .opcodes import CallKind, Pseudo
from .spec import (
    CodeSection,
    ExternVar,
    FuncInfo,
    KconfigVar,
    LineInfo,
    MapSpec,
    ObjectSpec,
    ProgramSpec,
    Reloc,
    UnlinkedCode,
)
from .uapi import MAP_IN_MAP_TYPES, MapFlags, MapType, ProgType

__all__ = ["ObjectError", "read_object", "EM_BPF", "RELOC_NAMES"]

_DATA_PREFIXES = (".data", ".rodata", ".bss")


class ObjectError(ValueError):
    """The input is not a BPF object capsule can read; the message says where and why."""


# sections carried through to ObjectSpec.extra_sections
EXTRA_PREFIX = ".capsule"


def read_object(src: str | Path | bytes, *, section_types: Mapping[str, SectionType] | None = None) -> ObjectSpec:
    """Parse a BPF ELF object (a path or its bytes).

    ``section_types`` gives the meaning of section names that only the object's own loader knows (Suricata's
    ``SEC("filter")`` socket filters, say), the way ``libbpf_register_prog_handler`` does; exact names, and
    they win over libbpf's conventions."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data, where = bytes(src), "<bytes>"
    else:
        where = str(src)
        try:
            data = Path(src).read_bytes()
        except OSError as e:
            raise ObjectError(f"{where}: cannot read: {e.strerror}") from None
    if len(data) < 4 or data[:4] != b"\x7fELF":
        raise ObjectError(f"{where}: not an ELF file")
    if len(data) < 64:
        raise ObjectError(f"{where}: truncated ELF header ({len(data)} bytes)")
    try:
        return _Reader(data, where, section_types or {}).read()
    except ObjectError:
        raise
    except (ELFError, BTFError, DecodeError, struct.error, ValueError) as e:
        raise ObjectError(f"{where}: malformed object: {e}") from None
    except Exception as e:  # pyelftools reports some corruptions as arbitrary exceptions
        raise ObjectError(f"{where}: malformed object ({type(e).__name__}: {e})") from None


@dataclass
class _Sym:
    name: str
    value: int
    size: int
    type: str  # STT_*
    bind: str  # STB_*
    shndx: int  # 0 for undefined, or a special value name turned into -1


@dataclass
class _Func:
    name: str
    shndx: int
    start: int  # slot
    end: int  # slot (exclusive)
    insns: list[Insn]
    # per instruction index: (target section, target slot) for calls / function addresses
    targets: dict[int, tuple[int, int]] = field(default_factory=dict)
    externs: dict[str, ExternVar] = field(default_factory=dict)  # extern variables its ld_imm64s name

    @property
    def key(self) -> tuple[int, int]:
        return (self.shndx, self.start)


class _Reader:
    def __init__(self, data: bytes, where: str, section_types: Mapping[str, SectionType]) -> None:
        self.where = where
        self.section_types = section_types
        self.elf = ELFFile(io.BytesIO(data))
        if self.elf.elfclass != 64 or not self.elf.little_endian:
            raise ObjectError(f"{where}: not a 64-bit little-endian ELF (BPF objects are)")
        machine = self.elf.header["e_machine"]
        if machine != "EM_BPF" and machine != EM_BPF:
            raise ObjectError(f"{where}: ELF machine is {machine}, not EM_BPF ({EM_BPF})")
        self.sections = list(self.elf.iter_sections())
        self.names = [s.name for s in self.sections]
        self.syms: list[_Sym] = []
        self.btf: BTF | None = None
        self.ext: BTFExt | None = None
        self.maps: dict[str, MapSpec] = {}
        self.map_at: dict[int, dict[int, str]] = {}  # .maps / maps section index -> offset -> map name
        self.externs: dict[str, ExternVar] = {}  # by name, for undefined symbols that BTF declares
        self.data_secs: dict[int, str] = {}  # section index -> map name
        self.funcs: dict[tuple[int, int], _Func] = {}
        self.unlinked = UnlinkedCode()

    def err(self, msg: str) -> ObjectError:
        return ObjectError(f"{self.where}: {msg}")

    # -- driver -----------------------------------------------------------------------------------------
    def read(self) -> ObjectSpec:
        self._read_symbols()
        self._read_btf()
        license_ = self._read_license()
        self._read_data_sections()
        self._read_btf_maps()
        self._read_legacy_maps()
        self._read_externs()
        self._read_code()
        programs: dict[str, ProgramSpec] = {}
        for f in self.funcs.values():
            if f.shndx == self.text_idx:
                continue
            sec = self.names[f.shndx]
            st = self.section_types.get(sec.removeprefix("?")) or section_type(sec)
            if st is not None and sec.startswith("?"):
                st = replace(st, autoload=False)
            prog = ProgramSpec(
                name=f.name,
                section=sec,
                type=st.prog_type if st else ProgType.UNSPEC,
                insns=[],
                license=license_,
                expected_attach_type=st.expected_attach_type if st else 0,
                attach_to=st.attach_to if st else "",
                flags=st.flags if st else 0,
                autoload=st.autoload if st else not sec.startswith("?"),
            )
            self._link(prog, f)
            programs[f.name] = prog
        self._read_map_slots(programs)
        extra = {
            sec.name: sec.data()
            for sec in self.elf.iter_sections()
            if sec.name.startswith(EXTRA_PREFIX) and sec["sh_type"] == "SHT_PROGBITS"
        }
        return ObjectSpec(programs=programs, maps=self.maps, btf=self.btf, license=license_, extra_sections=extra,
                          unlinked=self.unlinked)

    # -- symbols, BTF, license --------------------------------------------------------------------------
    def _read_symbols(self) -> None:
        symtab = self.elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            raise self.err("no .symtab section")
        for s in symtab.iter_symbols():
            shndx = s["st_shndx"]
            if shndx == "SHN_UNDEF":
                shndx = SHN_UNDEF
            elif not isinstance(shndx, int):
                shndx = -1
            elif shndx >= len(self.sections):
                raise self.err(f"symbol {s.name!r} points at section {shndx}, which does not exist")
            self.syms.append(
                _Sym(s.name, s["st_value"], s["st_size"], s["st_info"]["type"], s["st_info"]["bind"], shndx)
            )
            if shndx > 0 and s.name and s["st_info"]["type"] not in ("STT_SECTION", "STT_FILE"):
                self.unlinked.symbols.setdefault(self.names[shndx], []).append((s["st_value"], s.name))
        self.text_idx = self.names.index(".text") if ".text" in self.names else -1

    def _read_btf(self) -> None:
        sec = self.elf.get_section_by_name(".BTF")
        if sec is None:
            return
        self.btf = BTF.parse(sec.data())
        ext = self.elf.get_section_by_name(".BTF.ext")
        if ext is not None:
            self.ext = BTFExt.parse(ext.data(), self.btf.strings)
        sizes = {s.name: s["sh_size"] for s in self.sections}
        offsets = {s.name: s.value for s in self.syms if s.type == "STT_OBJECT" and s.shndx > 0}
        self.btf.fixup_datasecs(sizes, offsets)

    def _read_license(self) -> str:
        sec = self.elf.get_section_by_name("license")
        if sec is None:
            return "GPL"
        return sec.data().split(b"\0", 1)[0].decode("ascii", "replace")

    # -- maps -------------------------------------------------------------------------------------------
    def _read_data_sections(self) -> None:
        for idx, sec in enumerate(self.sections):
            name = sec.name
            if not any(name == p or name.startswith(p + ".") for p in _DATA_PREFIXES):
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
            type=vals["type"],
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

    def _relocations_of(self, target: int) -> list[tuple[int, _Sym]]:
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

    # -- code -------------------------------------------------------------------------------------------
    def _read_code(self) -> None:
        relocs = self._read_relocations()
        for idx, sec in enumerate(self.sections):
            if sec["sh_type"] != "SHT_PROGBITS" or not sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
                continue
            data = sec.data()
            insns = decode(data)
            self.unlinked.sections.append(CodeSection(sec.name, insns, {
                slot: self._reloc(rtype, sym) for slot, (rtype, sym) in relocs.get(idx, {}).items()
            }))
            slots, pos = {}, 0
            for i, ins in enumerate(insns):
                slots[pos] = i
                pos += ins.slots()
            for s in self.syms:
                if s.shndx != idx or s.type != "STT_FUNC":
                    continue
                if s.value % SLOT or s.size % SLOT or s.value + s.size > len(data):
                    raise self.err(f"function {s.name!r} in {sec.name}: bad value/size {s.value}/{s.size}")
                start, end = s.value // SLOT, (s.value + s.size) // SLOT
                if start not in slots or (end not in slots and end != pos):
                    raise self.err(f"function {s.name!r} in {sec.name} does not start/end at an instruction")
                lo, hi = slots[start], slots.get(end, len(insns))
                f = _Func(s.name, idx, start, end, [replace(i) for i in insns[lo:hi]])
                self._resolve(f, relocs.get(idx, {}))
                self.funcs[f.key] = f

    def _read_relocations(self) -> dict[int, dict[int, tuple[int, _Sym]]]:
        """Relocations of code sections: section index -> slot -> (type, symbol). Other sections' relocations
        (debug info, .BTF) are checked for known types and otherwise ignored."""
        out: dict[int, dict[int, tuple[int, _Sym]]] = {}
        for sec in self.sections:
            if sec["sh_type"] not in ("SHT_REL", "SHT_RELA"):
                continue
            target = sec["sh_info"]
            if not 0 < target < len(self.sections):
                raise self.err(f"{sec.name} applies to section {target}, which does not exist")
            tsec = self.sections[target]
            is_code = tsec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR
            table = out.setdefault(target, {})
            for r in sec.iter_relocations():
                rtype, symi, off = r["r_info_type"], r["r_info_sym"], r["r_offset"]
                if rtype not in RELOC_NAMES:
                    raise self.err(f"unknown relocation type {rtype} in {sec.name} at offset {off}")
                if symi >= len(self.syms):
                    raise self.err(
                        f"relocation in {sec.name} at offset {off} refers to symbol #{symi}, "
                        f"which does not exist ({len(self.syms)} symbols)"
                    )
                if not is_code or rtype == R_BPF_NONE:
                    continue
                if rtype not in (R_BPF_64_64, R_BPF_64_32):
                    raise self.err(
                        f"relocation {RELOC_NAMES[rtype]} not supported in code section "
                        f"{tsec.name} (offset {off})"
                    )
                if off % SLOT:
                    raise self.err(f"relocation in {sec.name} at unaligned offset {off}")
                table[off // SLOT] = (rtype, self.syms[symi])
        return out

    def _reloc(self, rtype: int, sym: _Sym) -> Reloc:
        section = self.names[sym.shndx] if sym.shndx > 0 else None
        if sym.type == "STT_SECTION":
            return Reloc(rtype, section or "", section, sym.value, section_symbol=True)
        return Reloc(rtype, sym.name, section, sym.value)

    def _resolve(self, f: _Func, relocs: dict[int, tuple[int, _Sym]]) -> None:
        """Turn relocated instructions of one function into symbolic refs / call targets."""
        pos = f.start
        for i, ins in enumerate(f.insns):
            rel = relocs.get(pos)
            here = pos
            pos += ins.slots()
            if rel is None:
                if ins.is_call and ins.src == CallKind.BPF:
                    f.targets[i] = (f.shndx, here + ins.imm + 1)
                continue
            rtype, sym = rel
            where = f"{self.names[f.shndx]}+{here * SLOT} ({f.name})"
            if ins.is_call:
                if sym.shndx == SHN_UNDEF:
                    ins.src, ins.imm, ins.ref = CallKind.KFUNC, 0, sym.name
                    continue
                if not self._is_code(sym.shndx):
                    raise self.err(f"{where}: call relocation against {sym.name!r}, not a function")
                ins.src = CallKind.BPF
                f.targets[i] = (sym.shndx, sym.value // SLOT + ins.imm + 1)
                continue
            if not ins.is_ld_imm64:
                raise self.err(f"{where}: relocation on an instruction that is neither ld_imm64 nor call")
            low = signed(ins.imm, 32)
            if sym.shndx == SHN_UNDEF:
                ins.src, ins.imm, ins.ref = Pseudo.BTF_ID, 0, sym.name
                f.externs[sym.name] = self.externs.get(sym.name) or ExternVar(sym.name, weak=sym.bind == "STB_WEAK")
            elif sym.shndx in self.map_at:
                name = sym.name if sym.type == "STT_OBJECT" else self.map_at[sym.shndx].get(sym.value + low)
                if name is None or name not in self.maps:
                    raise self.err(f"{where}: reference to unknown map {sym.name!r}")
                ins.src, ins.imm, ins.ref = Pseudo.MAP_FD, 0, name
            elif sym.shndx in self.data_secs:
                off = sym.value + low
                ins.src, ins.imm, ins.ref = (
                    Pseudo.MAP_VALUE,
                    (off & MASK32) << 32,
                    self.data_secs[sym.shndx],
                )
            elif sym.shndx > 0 and self._is_code(sym.shndx):
                ins.src, ins.imm = Pseudo.FUNC, 0
                f.targets[i] = (sym.shndx, (sym.value + low) // SLOT)
            else:
                sec = self.names[sym.shndx] if sym.shndx > 0 else "?"
                raise self.err(
                    f"{where}: relocation against {sym.name or sec!r} in section {sec!r}, "
                    "which is not a map, global data or code section"
                )

    def _is_code(self, shndx: int) -> bool:
        return shndx > 0 and bool(self.sections[shndx]["sh_flags"] & SH_FLAGS.SHF_EXECINSTR)

    # -- linking ----------------------------------------------------------------------------------------
    def _func_at(self, key: tuple[int, int], caller: _Func) -> _Func:
        f = self.funcs.get(key)
        if f is None:
            raise self.err(
                f"{caller.name}: call/address of {self.names[key[0]]}+{key[1] * SLOT}, "
                "which is not the start of a function"
            )
        return f

    def _link(self, prog: ProgramSpec, entry: _Func) -> None:
        """Lay out entry + reachable subprograms; fix relative offsets; carry func/line info."""
        order, placed, total = [entry], {entry.key: 0}, entry.end - entry.start
        k = 0
        while k < len(order):
            for tgt in order[k].targets.values():
                callee = self._func_at(tgt, order[k])
                if callee.key not in placed:
                    placed[callee.key] = total
                    total += callee.end - callee.start
                    order.append(callee)
            k += 1
        out: list[Insn] = []
        for f in order:
            base = placed[f.key]
            pos = base
            for i, ins in enumerate(f.insns):
                ins = replace(ins)
                if i == 0:
                    ins.sym = f.name
                tgt = f.targets.get(i)
                if tgt is not None:
                    dest = placed[tgt] if tgt in placed else None
                    assert dest is not None
                    rel = dest - (pos + 1)
                    ins.imm = rel if ins.is_call else rel & MASK32
                out.append(ins)
                pos += ins.slots()
            self._carry_ext(prog, f, base)
            prog.externs.update(f.externs)
        prog.insns = out

    def _carry_ext(self, prog: ProgramSpec, f: _Func, base: int) -> None:
        if self.ext is None:
            return
        sec = self.names[f.shndx]
        for fi in self.ext.func_info.get(sec, ()):
            if f.start <= fi.insn_off < f.end:
                prog.func_infos.append(FuncInfo(base + fi.insn_off - f.start, fi.type_id))
        for li in self.ext.line_info.get(sec, ()):
            if f.start <= li.insn_off < f.end:
                prog.line_infos.append(
                    LineInfo(base + li.insn_off - f.start, li.file_name_off, li.line_off, li.line, li.col)
                )
