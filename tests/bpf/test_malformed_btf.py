"""Malformed BTF in an object (issue 16.4): a type that refers to a type id the blob does not have is refused
when the object is read, in one line, instead of a ``BTFError`` traceback from wherever the type is first
used (loading BTF for ``capsule verify``, synthesising BTF for ``capsule opt``)."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.btf_types import Kind, record_size
from capsule.bpf.elf import ObjectError, read_object
from tests.clang import CORPUS, compile_bpf


def with_bad_func(src: Path, dst: Path) -> None:
    """A copy of ``src`` whose first BTF FUNC points at type id 0xFFFF (the blob has far fewer)."""
    data = bytearray(src.read_bytes())
    with src.open("rb") as f:
        off = ELFFile(f).get_section_by_name(".BTF")["sh_offset"]
    hdr_len, type_off, type_len = struct.unpack_from("<HBBIIIII", data, off)[3:6]
    p = off + hdr_len + type_off
    end = p + type_len
    while p < end:
        info = struct.unpack_from("<I", data, p + 4)[0]
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        if kind == Kind.FUNC:
            struct.pack_into("<I", data, p + 8, 0xFFFF)
            break
        p += record_size(kind, vlen)
    else:
        raise AssertionError(f"{src} has no BTF FUNC")
    dst.write_bytes(bytes(data))


@pytest.fixture
def bad_object(tmp_path: Path) -> Path:
    out = tmp_path / "bad_btf.o"
    with_bad_func(compile_bpf(CORPUS / "xdp_parse.c", "v3"), out)
    return out


def test_reader_refuses_a_dangling_type_reference(bad_object: Path) -> None:
    with pytest.raises(ObjectError, match=r"FUNC .*refers to type id 65535, which does not exist"):
        read_object(bad_object)


@pytest.mark.parametrize("command", [["verify"], ["opt", "--no-check", "-o", "OUT"], ["opt", "-o", "OUT"],
                                     ["disasm"]])
def test_commands_give_one_line(command: list[str], bad_object: Path, tmp_path: Path) -> None:
    argv = [str(tmp_path / "out.o") if a == "OUT" else a for a in command]
    res = subprocess.run([sys.executable, "-m", "capsule.cli", argv[0], str(bad_object), *argv[1:]],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert str(bad_object) in res.stderr and "65535" in res.stderr


def with_bad_func_info(src: Path, dst: Path) -> None:
    """A copy of ``src`` whose first .BTF.ext func_info names type id 0xFFFF."""
    data = bytearray(src.read_bytes())
    with src.open("rb") as f:
        off = ELFFile(f).get_section_by_name(".BTF.ext")["sh_offset"]
    hdr_len, fi_off = struct.unpack_from("<HBBIII", data, off)[3:5]
    # func_info: u32 record size, then per section: u32 name offset, u32 count, records (u32 insn_off, u32 type_id)
    struct.pack_into("<I", data, off + hdr_len + fi_off + 4 + 8 + 4, 0xFFFF)
    dst.write_bytes(bytes(data))


def test_func_info_naming_no_func_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "bad_ext.o"
    with_bad_func_info(compile_bpf(CORPUS / "xdp_parse.c", "v3"), out)
    with pytest.raises(ObjectError, match=r"func_info of xdp\+0: type id 65535 is not a FUNC"):
        read_object(out)
    res = subprocess.run([sys.executable, "-m", "capsule.cli", "opt", "--no-check", str(out), "-o",
                          str(tmp_path / "o.o")], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "Traceback" not in res.stderr and "65535" in res.stderr, res.stderr
