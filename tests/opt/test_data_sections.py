"""Custom global-data sections (issue 16.6): every ``.rodata.*``, ``.data.*`` and ``.bss.*`` section is a
global-data map, as libbpf treats it (cilium's objects keep their configuration in ``.rodata.config``), through
the reader, the optimizer, the writer and the loader.

The defect: when the optimizer removed the last load of a global-data section's address, it put back a map
reference to keep the map bound to the program, as a *map pointer* (``MAP_FD``); the ELF writer can express a
data section only as a value address (``MAP_VALUE``), so ``capsule opt`` failed with "reference to unknown map
'.rodata.config'"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from capsule.bpf.asm import R0, R1, exit_, ld_map_value, mov
from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import object_bytes
from capsule.bpf.opcodes import Pseudo
from capsule.bpf.uapi import MapFlags, MapType
from capsule.opt.pipeline import make_passes, optimize_object
from tests.clang import compile_bpf

SOURCE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
const volatile int cfg_port SEC(".rodata.config") = 53;
const volatile int cfg_mode SEC(".rodata.config") = 2;
int seen SEC(".data.stats") = 7;
int hits SEC(".bss.counters");
SEC("xdp") int prog(struct xdp_md *ctx) {
    seen += 1;
    hits++;
    if (cfg_mode == 2)
        return cfg_port == 53 ? XDP_PASS : XDP_DROP;
    return XDP_ABORTED;
}
char LICENSE[] SEC("license") = "GPL";
"""
SECTIONS = (".rodata.config", ".data.stats", ".bss.counters")


@pytest.fixture(scope="module")
def obj() -> Path:
    return compile_bpf(SOURCE, "v3")


def test_reader_makes_each_section_a_global_data_map(obj: Path) -> None:
    spec = read_object(obj)
    for name in SECTIONS:
        m = spec.maps[name]
        assert (m.type, m.max_entries, m.section) == (MapType.ARRAY, 1, name)
        assert m.freeze == name.startswith(".rodata")
        assert bool(m.flags & MapFlags.RDONLY_PROG) == name.startswith(".rodata")
    assert spec.maps[".rodata.config"].contents == (53).to_bytes(4, "little") + (2).to_bytes(4, "little")
    assert spec.maps[".bss.counters"].contents == bytes(4)


@pytest.mark.parametrize("section", SECTIONS)
def test_optimizer_keeps_a_dead_data_reference_the_writer_can_write(obj: Path, section: str) -> None:
    spec = read_object(obj)
    ps = spec.programs["prog"]
    # r1 = &section (dead: dead-code removal deletes it, and must put a reference back); r0 = XDP_PASS; exit
    dead = replace(ps, insns=[ld_map_value(R1, section), mov(R0, 2), exit_()], line_infos=[],
                   func_infos=ps.func_infos[:1])
    result = optimize_object(replace(spec, programs={"prog": dead}, unlinked=None), make_passes())
    kept = [i for i in result.spec.programs["prog"].insns if i.ref == section]
    assert kept and all(i.src == Pseudo.MAP_VALUE for i in kept)
    back = read_object(object_bytes(result.spec))
    refs = {(i.src, i.ref) for i in back.programs["prog"].insns if i.ref}
    assert refs == {(Pseudo.MAP_VALUE, section)}
    assert back.maps[section].section == section


def test_whole_object_through_opt_and_writer(obj: Path) -> None:
    spec = read_object(obj)
    result = optimize_object(spec, make_passes())
    back = read_object(object_bytes(result.spec))
    assert {n: (m.type, m.freeze, m.contents) for n, m in back.maps.items() if n in SECTIONS} == \
        {n: (m.type, m.freeze, m.contents) for n, m in spec.maps.items() if n in SECTIONS}
