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
Maps and externs are read by ``elf_maps.MapReader``, which this reader mixes in; code and linking are here.
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
from .btf_types import Func
from .elf_format import EM_BPF, R_BPF_64_32, R_BPF_64_64, R_BPF_NONE, RELOC_NAMES, SHN_UNDEF
from .elf_maps import MapReader, Sym
from .elf_sections import SectionType, section_type
from .insn import SLOT, DecodeError, Insn, decode
from .opcodes import CallKind, Pseudo
from .spec import (
    CodeSection,
    ExternVar,
    FuncInfo,
    LineInfo,
    MapSpec,
    ObjectSpec,
    ProgramSpec,
    Reloc,
    UnlinkedCode,
    Unplaced,
)
from .uapi import ProgType

__all__ = ["ObjectError", "read_object", "EM_BPF", "RELOC_NAMES"]



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


class _Reader(MapReader):
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
        self.syms: list[Sym] = []
        self.btf: BTF | None = None
        self.ext: BTFExt | None = None
        self.maps: dict[str, MapSpec] = {}
        self.map_at: dict[int, dict[int, str]] = {}  # .maps / maps section index -> offset -> map name
        self.externs: dict[str, ExternVar] = {}  # by name, for undefined symbols that BTF declares
        self.data_secs: dict[int, str] = {}  # section index -> map name
        self.funcs: dict[tuple[int, int], _Func] = {}
        self.unlinked = UnlinkedCode()
        self.placed: set[tuple[int, int]] = set()  # keys of the functions some program holds

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
        self.unlinked.unplaced += [Unplaced(self.names[f.shndx], f.start, f.end, f.name)
                                   for f in self.funcs.values() if f.key not in self.placed]
        self.unlinked.unplaced.sort(key=lambda u: (self.names.index(u.section), u.start))
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
                Sym(s.name, s["st_value"], s["st_size"], s["st_info"]["type"], s["st_info"]["bind"], shndx)
            )
            if shndx > 0 and s.name and s["st_info"]["type"] not in ("STT_SECTION", "STT_FILE"):
                self.unlinked.symbols.setdefault(self.names[shndx], []).append((s["st_value"], s.name))
        self.text_idx = self.names.index(".text") if ".text" in self.names else -1

    def _read_btf(self) -> None:
        sec = self.elf.get_section_by_name(".BTF")
        if sec is None:
            return
        self.btf = BTF.parse(sec.data())
        self.btf.check_references()
        ext = self.elf.get_section_by_name(".BTF.ext")
        if ext is not None:
            self.ext = BTFExt.parse(ext.data(), self.btf.strings)
            for secname, infos in self.ext.func_info.items():
                for fi in infos:
                    if not 0 < fi.type_id < len(self.btf) or not isinstance(self.btf.type_by_id(fi.type_id), Func):
                        raise self.err(f".BTF.ext func_info of {secname}+{fi.insn_off * SLOT}: type id {fi.type_id} "
                                       "is not a FUNC of the object's BTF")
        sizes = {s.name: s["sh_size"] for s in self.sections}
        offsets = {s.name: s.value for s in self.syms if s.type == "STT_OBJECT" and s.shndx > 0}
        self.btf.fixup_datasecs(sizes, offsets)

    def _read_license(self) -> str:
        sec = self.elf.get_section_by_name("license")
        if sec is None:
            return "GPL"
        return sec.data().split(b"\0", 1)[0].decode("ascii", "replace")

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
            self._uncovered(idx, pos)

    def _uncovered(self, idx: int, end: int) -> None:
        """Record the slots of section ``idx`` that no function symbol covers (no program can hold them)."""
        covered = sorted((f.start, f.end) for f in self.funcs.values() if f.shndx == idx)
        labels = {s.value // SLOT: s.name for s in self.syms if s.shndx == idx and s.name and s.type == "STT_NOTYPE"}
        pos = 0
        for lo, hi in [*covered, (end, end)]:
            if lo > pos:
                self.unlinked.unplaced.append(Unplaced(self.names[idx], pos, lo, label=labels.get(pos, "")))
            pos = max(pos, hi)

    def _read_relocations(self) -> dict[int, dict[int, tuple[int, Sym]]]:
        """Relocations of code sections: section index -> slot -> (type, symbol). Other sections' relocations
        (debug info, .BTF) are checked for known types and otherwise ignored."""
        out: dict[int, dict[int, tuple[int, Sym]]] = {}
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

    def _reloc(self, rtype: int, sym: Sym) -> Reloc:
        section = self.names[sym.shndx] if sym.shndx > 0 else None
        if sym.type == "STT_SECTION":
            return Reloc(rtype, section or "", section, sym.value, section_symbol=True)
        return Reloc(rtype, sym.name, section, sym.value)

    def _resolve(self, f: _Func, relocs: dict[int, tuple[int, Sym]]) -> None:
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
        self.placed.add(entry.key)
        k = 0
        while k < len(order):
            for tgt in order[k].targets.values():
                callee = self._func_at(tgt, order[k])
                if callee.key not in placed:
                    placed[callee.key] = total
                    self.placed.add(callee.key)
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
                target = f.targets.get(i)
                if target is not None:
                    dest = placed[target] if target in placed else None
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
