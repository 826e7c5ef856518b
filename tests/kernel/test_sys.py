"""The syscall layer: attr layouts match the uapi header, FD ownership, errors."""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from capsule.kernel import sys as ksys
from capsule.kernel.consts import Cmd, MapType
from capsule.kernel.errors import BPFError
from capsule.kernel.maps import Map
from capsule.kernel.sys import FD, MapCreateAttr, bpf, enable_stats, name_bytes

HEADER = Path("/usr/include/linux/bpf.h")
U = "union bpf_attr"

# (our Structure, our field, C expression whose offsetof we compare, C type)
LAYOUT = [
    *[(ksys.MapCreateAttr, f, f, U) for f in (
        "map_type", "key_size", "value_size", "max_entries", "map_flags", "inner_map_fd", "numa_node",
        "map_name", "map_ifindex", "btf_fd", "btf_key_type_id", "btf_value_type_id",
        "btf_vmlinux_value_type_id", "map_extra", "value_type_btf_obj_fd", "map_token_fd")],
    *[(ksys.MapElemAttr, f, c, U) for f, c in (
        ("map_fd", "map_fd"), ("key", "key"), ("value", "value"), ("flags", "flags"))],
    *[(ksys.ProgLoadAttr, f, f, U) for f in (
        "prog_type", "insn_cnt", "insns", "license", "log_level", "log_size", "log_buf", "kern_version",
        "prog_flags", "prog_name", "prog_ifindex", "expected_attach_type", "prog_btf_fd",
        "func_info_rec_size", "func_info", "func_info_cnt", "line_info_rec_size", "line_info",
        "line_info_cnt",
        "attach_btf_id",
        "attach_prog_fd", "core_relo_cnt", "fd_array", "core_relos", "core_relo_rec_size", "log_true_size",
        "prog_token_fd", "fd_array_cnt")],
    *[(ksys.ObjAttr, f, f, U) for f in ("pathname", "bpf_fd", "file_flags", "path_fd")],
    *[(ksys.TestRunAttr, f, "test." + f, U) for f in (
        "prog_fd", "retval", "data_size_in", "data_size_out", "data_in", "data_out", "repeat", "duration",
        "ctx_size_in", "ctx_size_out", "ctx_in", "ctx_out", "flags", "cpu", "batch_size")],
    *[(ksys.GetIdAttr, f, c, U) for f, c in (
        ("id", "start_id"), ("next_id", "next_id"), ("open_flags", "open_flags"))],
    *[(ksys.InfoAttr, f, "info." + f, U) for f in ("bpf_fd", "info_len", "info")],
    *[(ksys.BtfLoadAttr, f, f, U) for f in (
        "btf", "btf_log_buf", "btf_size", "btf_log_size", "btf_log_level", "btf_log_true_size", "btf_flags",
        "btf_token_fd")],
    *[(ksys.LinkCreateAttr, f, "link_create." + c, U) for f, c in (
        ("prog_fd", "prog_fd"), ("target_fd", "target_fd"), ("attach_type", "attach_type"),
        ("flags", "flags"), ("extra", "target_btf_id"))],
    (ksys.LinkDetachAttr, "link_fd", "link_detach.link_fd", U),
    (ksys.EnableStatsAttr, "type", "enable_stats.type", U),
    *[(ksys.ProgBindMapAttr, f, "prog_bind_map." + f, U) for f in ("prog_fd", "map_fd", "flags")],
    *[(ksys.ProgInfo, f, f, "struct bpf_prog_info") for f, _ in ksys.ProgInfo._fields_
      if f != "gpl_compatible"],
    *[(ksys.MapInfo, f, f, "struct bpf_map_info") for f, _ in ksys.MapInfo._fields_],
    *[(ksys.BtfInfo, f, f, "struct bpf_btf_info") for f, _ in ksys.BtfInfo._fields_],
    *[(ksys.LinkInfo, f, c, "struct bpf_link_info") for f, c in (
        ("type", "type"), ("id", "id"), ("prog_id", "prog_id"), ("extra", "xdp.ifindex"))],
]


def _c_offsets(tmp_path: Path, rows: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <linux/bpf.h>", "int main(void) {"]
    for ctype, expr in rows:
        lines.append(f'    printf("%s|%s|%zu\\n", "{ctype}", "{expr}", offsetof({ctype}, {expr}));')
    lines.append("    return 0;\n}")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["clang-19", "-o", str(exe), str(src)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines():
        ctype, expr, off = line.split("|")
        result[(ctype, expr)] = int(off)
    return result


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 not installed")
def test_attr_layouts_match_uapi_header(tmp_path):
    header = HEADER.read_text()
    # fields newer than the installed header (e.g. fd_array_cnt, 6.14) cannot be checked against it
    rows = [r for r in LAYOUT if r[2].split(".")[-1] in header]
    assert len(rows) > 150
    c = _c_offsets(tmp_path, sorted({(ctype, expr) for _, _, expr, ctype in rows}))
    bad = [(s.__name__, f, getattr(s, f).offset, c[(ctype, expr)])
           for s, f, expr, ctype in rows if getattr(s, f).offset != c[(ctype, expr)]]
    assert bad == []


def test_structure_sizes():
    # info structs must be exactly the kernel's size so the kernel fills all of them
    assert ctypes.sizeof(ksys.ProgInfo) == 232
    assert ctypes.sizeof(ksys.MapInfo) == 88
    assert ctypes.sizeof(ksys.ProgLoadAttr) == 152
    assert ctypes.sizeof(ksys.MapCreateAttr) == 80
    assert ctypes.sizeof(ksys.TestRunAttr) == 80


def test_fd_closes_exactly_once():
    r, w = os.pipe()
    os.close(w)
    fd = FD(r)
    assert int(fd) == r and fd.fileno() == r and not fd.closed
    fd.close()
    assert fd.closed
    fd.close()  # a second close is a no-op, never closes a reused number
    with pytest.raises(ValueError):
        int(fd)
    with pytest.raises(OSError):
        os.fstat(r)


def test_fd_context_manager_and_detach():
    r, w = os.pipe()
    with FD(w) as fd:
        assert fd.fileno() == w
    assert fd.closed
    owner = FD(r)
    raw = owner.detach()
    assert owner.closed and raw == r
    del owner
    os.fstat(raw)  # still open: detach gave up ownership
    os.close(raw)
    with pytest.raises(ValueError):
        FD(-1)


def test_fd_del_is_a_safety_net():
    r, w = os.pipe()
    os.close(w)
    fd = FD(r)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del fd
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) for x in caught)
    with pytest.raises(OSError):
        os.fstat(r)


def test_fd_dup():
    r, w = os.pipe()
    os.close(w)
    with FD(r) as a, a.dup() as b:
        assert b.fileno() != a.fileno()


@pytest.mark.requires_bpf
def test_bpf_error_is_oserror_and_readable():
    attr = MapCreateAttr(map_type=0xFFFF, key_size=4, value_size=4, max_entries=1)
    with pytest.raises(BPFError) as ei:
        bpf(Cmd.MAP_CREATE, attr, "creating a map of a type that does not exist")
    e = ei.value
    assert isinstance(e, OSError)
    assert e.errno == errno.EINVAL
    assert e.cmd is Cmd.MAP_CREATE
    assert str(e) == ("bpf(MAP_CREATE) failed with EINVAL (Invalid argument): "
                      "creating a map of a type that does not exist")


@pytest.mark.requires_bpf
def test_map_create_error_names_the_map():
    with pytest.raises(BPFError) as ei:
        Map.create(MapType.ARRAY, 4, 4, 0, name="empty")  # max_entries 0 is invalid
    assert ei.value.errno == errno.EINVAL
    assert "ARRAY map 'empty'" in str(ei.value)


def test_name_bytes():
    assert name_bytes("hello") == b"hello"
    assert name_bytes("a-b c") == b"a_b_c"
    assert name_bytes("x" * 40) == b"x" * 15
    assert name_bytes(".rodata") == b".rodata"


@pytest.mark.requires_bpf
def test_enable_stats_returns_owned_fd():
    fd = enable_stats()
    try:
        assert os.readlink(f"/proc/self/fd/{fd.fileno()}").startswith("anon_inode:")
    finally:
        fd.close()
