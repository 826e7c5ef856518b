"""A minimal ELF64 little-endian relocatable-object builder for BPF (EM_BPF), used by ``elf_write``.

Only what a BPF object needs: PROGBITS/NOBITS sections, one symbol table with its string table (shared with
section names, as clang does), and ``SHT_REL`` relocation sections named ``.rel<section>``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

EM_BPF = 247
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_REL = struct.Struct("<QQ")

SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS, SHT_REL = 1, 2, 3, 8, 9
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_INFO_LINK = 1, 2, 4, 0x40
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3
STB_LOCAL, STB_GLOBAL = 0, 1
SHN_UNDEF = 0

# relocation types of EM_BPF (what the reader accepts and the writer emits)
R_BPF_NONE, R_BPF_64_64, R_BPF_64_ABS64, R_BPF_64_ABS32, R_BPF_64_NODYLD32, R_BPF_64_32 = 0, 1, 2, 3, 4, 10
RELOC_NAMES = {
    R_BPF_NONE: "R_BPF_NONE",
    R_BPF_64_64: "R_BPF_64_64",
    R_BPF_64_ABS64: "R_BPF_64_ABS64",
    R_BPF_64_ABS32: "R_BPF_64_ABS32",
    R_BPF_64_NODYLD32: "R_BPF_64_NODYLD32",
    R_BPF_64_32: "R_BPF_64_32",
}

# kind -> (sh_type, sh_flags, alignment)
_KINDS = {
    "code": (SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, 8),
    "maps": (SHT_PROGBITS, SHF_ALLOC | SHF_WRITE, 8),
    "data": (SHT_PROGBITS, SHF_ALLOC | SHF_WRITE, 8),
    "rodata": (SHT_PROGBITS, SHF_ALLOC, 8),
    "bss": (SHT_NOBITS, SHF_ALLOC | SHF_WRITE, 8),
    "btf": (SHT_PROGBITS, 0, 4),
    "note": (SHT_PROGBITS, 0, 8),
}
_SYMTYPES = {"notype": STT_NOTYPE, "object": STT_OBJECT, "func": STT_FUNC, "section": STT_SECTION}


@dataclass(eq=False)
class Section:
    name: str
    kind: str
    data: bytes = b""
    relocs: list[tuple[int, Symbol, int]] = field(default_factory=list)  # (offset, symbol, type)
    index: int = 0


@dataclass(eq=False)
class Symbol:
    name: str
    section: Section | None  # None: undefined (an extern)
    value: int
    size: int
    type: int
    bind: int
    index: int = 0


class ElfBuilder:
    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.symbols: list[Symbol] = []
        self._section_syms: dict[int, Symbol] = {}

    def add_section(self, name: str, kind: str, data: bytes = b"") -> Section:
        if kind not in _KINDS:
            raise ValueError(f"unknown section kind {kind!r}")
        s = Section(name, kind, data)
        self.sections.append(s)
        return s

    def add_symbol(
        self, name: str, section: Section | None, value: int, size: int, type_: str, global_: bool
    ) -> Symbol:
        sym = Symbol(name, section, value, size, _SYMTYPES[type_], STB_GLOBAL if global_ else STB_LOCAL)
        self.symbols.append(sym)
        return sym

    def section_symbol(self, sec: Section) -> Symbol:
        sym = self._section_syms.get(id(sec))
        if sym is None:
            sym = Symbol("", sec, 0, 0, STT_SECTION, STB_LOCAL)
            self._section_syms[id(sec)] = sym
        return sym

    def encode(self) -> bytes:
        # final section list: null, each section followed by its .rel, then .symtab and .strtab
        layout: list[tuple[str, Section | None]] = [("null", None)]
        for sec in self.sections:
            layout.append(("sec", sec))
            if sec.relocs:
                layout.append(("rel", sec))
        layout += [("symtab", None), ("strtab", None)]
        for i, (what, entry) in enumerate(layout):
            if what == "sec" and entry is not None:
                entry.index = i
        symtab_idx, strtab_idx = len(layout) - 2, len(layout) - 1

        strtab = bytearray(b"\0")
        str_offs: dict[str, int] = {"": 0}

        def sadd(s: str) -> int:
            if s not in str_offs:
                str_offs[s] = len(strtab)
                strtab.extend(s.encode() + b"\0")
            return str_offs[s]

        locals_ = [Symbol("", None, 0, 0, STT_NOTYPE, STB_LOCAL)]
        locals_ += list(self._section_syms.values())
        locals_ += [s for s in self.symbols if s.bind == STB_LOCAL]
        globals_ = [s for s in self.symbols if s.bind != STB_LOCAL]
        syms = locals_ + globals_
        for i, sym in enumerate(syms):
            sym.index = i
        symdata = b"".join(
            _SYM.pack(
                sadd(sym.name) if sym.name else 0,
                sym.bind << 4 | sym.type,
                0,
                sym.section.index if sym.section is not None else 0,
                sym.value,
                sym.size,
            )
            for sym in syms
        )

        # section contents and headers
        body = bytearray(b"\0" * _EHDR.size)
        headers: list[bytes] = []

        def place(data: bytes, align: int) -> int:
            while len(body) % align:
                body.append(0)
            off = len(body)
            body.extend(data)
            return off

        for what, s in layout:
            if what == "null":
                headers.append(_SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            elif what == "sec":
                assert s is not None
                sh_type, flags, align = _KINDS[s.kind]
                name = sadd(s.name)
                if sh_type == SHT_NOBITS:
                    off = place(b"", align)
                else:
                    off = place(s.data, align)
                headers.append(_SHDR.pack(name, sh_type, flags, 0, off, len(s.data), 0, 0, align, 0))
            elif what == "rel":
                assert s is not None
                data = b"".join(_REL.pack(r_off, sym.index << 32 | rtype) for r_off, sym, rtype in s.relocs)
                off = place(data, 8)
                headers.append(
                    _SHDR.pack(
                        sadd(".rel" + s.name),
                        SHT_REL,
                        SHF_INFO_LINK,
                        0,
                        off,
                        len(data),
                        symtab_idx,
                        s.index,
                        8,
                        _REL.size,
                    )
                )
            elif what == "symtab":
                name = sadd(".symtab")
                off = place(symdata, 8)
                headers.append(
                    _SHDR.pack(
                        name, SHT_SYMTAB, 0, 0, off, len(symdata), strtab_idx, len(locals_), 8, _SYM.size
                    )
                )
            else:
                name = sadd(".strtab")
                off = place(bytes(strtab), 1)
                headers.append(_SHDR.pack(name, SHT_STRTAB, 0, 0, off, len(strtab), 0, 0, 1, 0))
        shoff = place(b"".join(headers), 8)
        ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
        ehdr = _EHDR.pack(
            ident, 1, EM_BPF, 1, 0, 0, shoff, 0, _EHDR.size, 0, 0, _SHDR.size, len(layout), strtab_idx
        )
        body[: _EHDR.size] = ehdr
        return bytes(body)
