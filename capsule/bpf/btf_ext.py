"""``.BTF.ext``: per-section func_info, line_info and CO-RE relocation records of an object file.

In an object file each record's ``insn_off`` is a byte offset inside its ELF section; ``BTFExt`` converts
to and from instruction slots, the unit of ``spec.FuncInfo``/``spec.LineInfo`` and of BPF_PROG_LOAD. Section
names are strings of the accompanying ``.BTF`` string table. CO-RE records are kept as raw bytes per section:
capsule does not apply CO-RE, but a read-write round trip keeps them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from .btf import MAGIC, BTFError, StringTable
from .insn import SLOT
from .spec import FuncInfo, LineInfo

_HDR = struct.Struct("<HBBIIIII")  # up to line_info_len
_CORE = struct.Struct("<II")
FUNC_REC = 8
LINE_REC = 16
CORE_REC = 16


@dataclass
class BTFExt:
    func_info: dict[str, list[FuncInfo]] = field(default_factory=dict)
    line_info: dict[str, list[LineInfo]] = field(default_factory=dict)
    core_relos: dict[str, bytes] = field(default_factory=dict)  # section -> raw records (CORE_REC each)
    flags: int = 0
    # clang always writes the 32-byte header with (possibly empty) CO-RE fields; kept for exact round trips
    core_header: bool = True

    @classmethod
    def parse(cls, data: bytes, strings: StringTable) -> BTFExt:
        if len(data) < _HDR.size:
            raise BTFError(f".BTF.ext too short ({len(data)} bytes)")
        magic, version, flags, hdr_len, fo, fl, lo, ll = _HDR.unpack_from(data)
        if magic != MAGIC or version != 1:
            raise BTFError(f"bad .BTF.ext magic 0x{magic:04x} / version {version}")
        ext = cls(flags=flags, core_header=hdr_len >= _HDR.size + _CORE.size)
        for sec, recs in _sections(data, hdr_len + fo, fl, FUNC_REC, strings):
            ext.func_info[sec] = [
                FuncInfo(off // SLOT, tid) for off, tid in (struct.unpack_from("<II", r) for r in recs)
            ]
        for sec, recs in _sections(data, hdr_len + lo, ll, LINE_REC, strings):
            out = []
            for r in recs:
                off, fname, lineoff, lc = struct.unpack_from("<IIII", r)
                out.append(LineInfo(off // SLOT, fname, lineoff, lc >> 10, lc & 0x3FF))
            ext.line_info[sec] = out
        if hdr_len >= _HDR.size + _CORE.size:
            co, cl = _CORE.unpack_from(data, _HDR.size)
            for sec, recs in _sections(data, hdr_len + co, cl, CORE_REC, strings):
                ext.core_relos[sec] = b"".join(r[:CORE_REC] for r in recs)
        return ext

    def encode(self, strings: StringTable) -> bytes:
        funcs = _encode_sections(
            FUNC_REC,
            strings,
            {
                sec: [struct.pack("<II", f.insn_off * SLOT, f.type_id) for f in recs]
                for sec, recs in self.func_info.items()
            },
        )
        lines = _encode_sections(
            LINE_REC,
            strings,
            {
                sec: [
                    struct.pack(
                        "<IIII",
                        li.insn_off * SLOT,
                        li.file_name_off,
                        li.line_off,
                        (li.line << 10) | (li.col & 0x3FF),
                    )
                    for li in recs
                ]
                for sec, recs in self.line_info.items()
            },
        )
        body = funcs + lines
        hdr_len = _HDR.size
        core = b""
        if self.core_relos or self.core_header:
            hdr_len += _CORE.size
        if self.core_relos:
            core = _encode_sections(
                CORE_REC,
                strings,
                {
                    sec: [raw[i : i + CORE_REC] for i in range(0, len(raw), CORE_REC)]
                    for sec, raw in self.core_relos.items()
                },
            )
        hdr = _HDR.pack(MAGIC, 1, self.flags, hdr_len, 0, len(funcs), len(funcs), len(lines))
        if hdr_len > _HDR.size:
            hdr += _CORE.pack(len(body), len(core))
        return hdr + body + core

    def sections(self) -> list[str]:
        seen = dict.fromkeys([*self.func_info, *self.line_info, *self.core_relos])
        return list(seen)


def _sections(data: bytes, start: int, length: int, min_rec: int,
              strings: StringTable) -> Iterator[tuple[str, list[bytes]]]:
    """Yield (section name, [record bytes]) of one info block."""
    if not length:
        return
    end = start + length
    if end > len(data) or length < 4:
        raise BTFError(".BTF.ext info block runs past the end of the section")
    (rec_size,) = struct.unpack_from("<I", data, start)
    if rec_size < min_rec:
        raise BTFError(f".BTF.ext record size {rec_size} smaller than {min_rec}")
    p = start + 4
    while p < end:
        if p + 8 > end:
            raise BTFError(".BTF.ext truncated section header")
        name_off, n = struct.unpack_from("<II", data, p)
        p += 8
        if p + n * rec_size > end:
            raise BTFError(f".BTF.ext: {n} records overrun the block")
        yield strings.get(name_off), [data[p + i * rec_size : p + (i + 1) * rec_size] for i in range(n)]
        p += n * rec_size


def _encode_sections(rec_size: int, strings: StringTable, secs: dict[str, list[bytes]]) -> bytes:
    """One info block; empty (not even the record size) without records, as libbpf refuses a block that
    holds only its record size."""
    if not any(secs.values()):
        return b""
    out = [struct.pack("<I", rec_size)]
    for sec, recs in secs.items():
        if not recs:
            continue
        out.append(struct.pack("<II", strings.add(sec), len(recs)))
        out.extend(recs)
    return b"".join(out)
