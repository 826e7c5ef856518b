"""A hostile object cannot reach the host (issue 15.3): an object whose maps, programs or ``.capsule.meta`` lie is
refused with one clear error before the host creates or writes anything, an object whose offsets lie traps at
instantiation as wasm says, and no host read or write made for the guest leaves its linear memory."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capsule.bpf.spec import ExternVar, MapSpec, ObjectSpec
from capsule.bpf.uapi import MapType, ProgType
from capsule.compiler import abi
from capsule.runtime.errors import CallError, GuestTrap
from capsule.runtime.instance import Instance
from capsule.runtime.trust import UntrustedObject
from capsule.runtime.wasi_host import KernelGuest, WasiError
from tests.fds import bpf_fd_count

from .objects import TINY_RESULT, tiny, with_meta, written

pytestmark = pytest.mark.requires_bpf


def _window(spec: ObjectSpec, **change: Any) -> ObjectSpec:
    spec.maps[abi.WINDOW_MAP] = dataclasses.replace(spec.maps[abi.WINDOW_MAP], **change)
    return spec


def _program(spec: ObjectSpec, **change: Any) -> ObjectSpec:
    ps = spec.programs[abi.ENTRY_PROGRAM]
    for k, v in change.items():
        setattr(ps, k, v)
    return spec


def _extra_map(spec: ObjectSpec) -> ObjectSpec:
    spec.maps["exfil"] = MapSpec("exfil", MapType.HASH, 8, 8, 1 << 20)
    return spec


def _no_window(spec: ObjectSpec) -> ObjectSpec:
    del spec.maps[abi.WINDOW_MAP]
    return spec


def _programs_map(spec: ObjectSpec) -> ObjectSpec:
    spec.maps[abi.PROGRAMS_MAP] = MapSpec(abi.PROGRAMS_MAP, MapType.PROG_ARRAY, 4, 4, 1)
    return spec


SHAPES: dict[str, tuple[Callable[[ObjectSpec], ObjectSpec], str]] = {
    "window-not-arena": (lambda s: _window(s, type=MapType.ARRAY, key_size=4, value_size=4), "not an arena"),
    "window-small": (lambda s: _window(s, max_entries=16), "has 16 pages"),
    "window-fixed-address": (lambda s: _window(s, map_extra=0x7000_0000_0000), "the host chooses"),
    "window-flags": (lambda s: _window(s, flags=s.maps[abi.WINDOW_MAP].flags | 1), "flags, contents"),
    "no-window": (_no_window, "no 'capsule_window' map"),
    "extra-map": (_extra_map, "map 'exfil' is not one capsule's compiler makes"),
    "programs-map-whole-object": (_programs_map, "a split object has one"),
    "xdp-program": (lambda s: _program(s, type=ProgType.XDP), "not a tc program"),
    "extern": (lambda s: _program(s, externs={"jiffies": ExternVar("jiffies", "kallsyms")}), "extern symbols"),
}


@pytest.mark.parametrize("case", SHAPES)
def test_misshapen_object_is_refused_before_anything_exists(case: str, no_fd_leak: None) -> None:
    make, message = SHAPES[case]
    spec = make(tiny())
    before = bpf_fd_count()
    with pytest.raises(UntrustedObject, match=message):
        Instance(spec)
    assert bpf_fd_count() == before


def _set(path: list[Any], value: object) -> Callable[[dict[str, Any]], None]:
    def change(meta: dict[str, Any]) -> None:
        target: Any = meta
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


LIES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "data-longer-than-section": (_set(["data", 0, "size"], 6), "the segments hold 6 bytes, the data section 5"),
    "data-elsewhere": (_set(["data", 0, "at"], 1), r"data\[0\].at: 1"),
    "table-huge": (_set(["tables", 0, "initial"], 1 << 30), "tables"),
    "global-get-out-of-range": (_set(["data", 0, "offset"], [[0x23, 9]]), "not a global index"),
    "entry-region-unknown": (_set(["funcs", 0, "entry"], 77), "not a region id"),
    "memory-beyond-window": (_set(["memory", "max"], abi.MAX_MEMORY_PAGES + 1), "memory.max"),
    "fibers-beyond-window": (_set(["options", "fibers"], 1 << 20), "options"),
    "export-out-of-range": (_set(["exports", 0, "index"], 5), "not a func index"),
    "expression-leaves-two": (_set(["elems", 0, "offset"], [[65, 0], [65, 1]]), "leaves 2"),
    "not-an-opcode": (_set(["globals", 0, "init"], [[0x10, 0]]), "not allowed in a constant expression"),
}


@pytest.mark.parametrize("case", LIES)
def test_lying_metadata_is_one_clear_error(case: str, no_fd_leak: None) -> None:
    change, message = LIES[case]
    spec = with_meta(tiny(), change)
    with pytest.raises(CallError, match=message):
        Instance(spec)


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"\xff\xfe", b'{"version": 1}', b"9" * 100_000])
def test_broken_metadata_is_one_clear_error(raw: bytes, no_fd_leak: None) -> None:
    spec = tiny()
    spec.extra_sections[abi.META_SECTION] = raw
    with pytest.raises(CallError, match=r"corrupted \.capsule\.meta"):
        Instance(spec)


OFFSETS = {  # well-formed, but pointing outside what the module declares: wasm's instantiation traps
    "data-past-memory": (_set(["data", 0, "offset"], [[65, 65536 - 2]]), "out of bounds memory access"),
    "data-wraps": (_set(["data", 0, "offset"], [[65, -1]]), "out of bounds memory access"),
    "elem-past-table": (_set(["elems", 0, "offset"], [[65, 2]]), "out of bounds table access"),
    "elem-huge-offset": (_set(["elems", 0, "offset"], [[66, (1 << 63) - 1]]), "out of bounds table access"),
}


@pytest.mark.parametrize("case", OFFSETS)
def test_offsets_outside_the_module_trap_at_instantiation(case: str, no_fd_leak: None) -> None:
    change, message = OFFSETS[case]
    with pytest.raises(GuestTrap, match=message):
        Instance(with_meta(tiny(), change))


def test_the_untouched_object_runs(no_fd_leak: None) -> None:
    with Instance(tiny()) as inst:
        assert inst.call("f") == [TINY_RESULT]


@pytest.mark.parametrize("addr,size", [(65536 - 2, 4), (65536, 1), (abi.RT_BASE, 8), (abi.CTRL, 1),
                                       ((1 << 32) - 1, 2), (-1, 1)])
def test_host_access_for_the_guest_stays_in_linear_memory(addr: int, size: int, no_fd_leak: None) -> None:
    with Instance(tiny()) as inst:
        guest = KernelGuest(inst)
        ctrl = bytes(inst.mem[abi.CTRL : abi.CTRL + 64])
        with pytest.raises(WasiError, match="outside its 0x10000 bytes of memory"):
            guest.write(addr, b"\xaa" * size)
        with pytest.raises(WasiError, match="outside its"):
            guest.read(addr, size)
        assert bytes(inst.mem[abi.CTRL : abi.CTRL + 64]) == ctrl
        guest.write(65536 - 4, b"abcd")  # the last bytes of memory are the guest's
        assert guest.read(65536 - 4, 4) == b"abcd"


def _capsule(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, timeout=300)


def _one_line_error(res: subprocess.CompletedProcess[bytes]) -> str:
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 1, err
    assert "Traceback" not in err and err.startswith("capsule: ") and err.count("\n") == 1, err
    return err


def test_cli_refuses_hostile_objects_in_one_line(tmp_path: Path) -> None:
    good = written(tiny(), tmp_path / "good.bpf.o").read_bytes()
    cases = {
        "garbage.bpf.o": os.urandom(4096),
        "empty.bpf.o": b"",
        "truncated.bpf.o": good[: len(good) // 2],
        "extra-map.bpf.o": written(_extra_map(tiny()), tmp_path / "x.o").read_bytes(),
        "lying-meta.bpf.o": written(with_meta(tiny(), LIES["table-huge"][0]), tmp_path / "y.o").read_bytes(),
        "good.bpf.o": good,  # not a WASI program: refused by run, still in one line
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        err = _one_line_error(_capsule("run", str(path)))
        assert name in err or "capsule: " in err
