"""Custom global-data sections (``.rodata.config``, ``.data.stats``, ``.bss.counters``, as cilium's objects
have) load as libbpf loads them: one-element ARRAY maps filled from the section, ``.rodata.*`` frozen, and so
does the object ``capsule opt`` writes for them (issue 16.6)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import object_bytes
from capsule.bpf.spec import ObjectSpec
from capsule.kernel.collection import Collection
from capsule.opt.pipeline import make_passes, optimize_object
from tests.clang import compile_bpf
from tests.opt.test_data_sections import SOURCE

pytestmark = pytest.mark.requires_bpf

PACKET = bytes(64)
XDP_DROP, XDP_PASS = 1, 2


def _original() -> ObjectSpec:
    return read_object(compile_bpf(SOURCE, "v3"))


def _optimised() -> ObjectSpec:
    return read_object(object_bytes(optimize_object(_original(), make_passes()).spec))


@pytest.mark.parametrize("make", [_original, _optimised], ids=["original", "optimised"])
def test_sections_load_fill_and_freeze(make) -> None:
    with Collection.load(make()) as coll:
        prog = coll.programs["prog"]
        assert prog.test_run(PACKET).retval == XDP_PASS  # cfg_mode == 2 and cfg_port == 53, from .rodata.config
        assert coll.maps[".data.stats"].lookup_int(0) == 8  # 7 + 1
        assert coll.maps[".bss.counters"].lookup_int(0) == 1
        with pytest.raises(OSError):  # frozen: not writable from user space
            coll.maps[".rodata.config"].update(0, bytes(8))


def test_rodata_config_can_be_set_before_load() -> None:
    with Collection.load(_original(), rodata={".rodata.config": struct.pack("<ii", 54, 2)}) as coll:
        assert coll.programs["prog"].test_run(PACKET).retval == XDP_DROP


def test_written_object_is_a_file_too(tmp_path: Path) -> None:
    out = tmp_path / "opt.o"
    out.write_bytes(object_bytes(optimize_object(_original(), make_passes()).spec))
    with Collection.load(read_object(out)) as coll:
        assert coll.programs["prog"].test_run(PACKET).retval == XDP_PASS
