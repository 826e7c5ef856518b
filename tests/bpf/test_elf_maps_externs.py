"""capsule.bpf.elf on what older and richer objects declare: legacy ``maps`` sections, map-in-map and program-array
definitions with initial slots, ``extern`` variables (``__kconfig``, ``__ksym``), ``SEC("?...")`` programs and
section names only the object's own loader knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsule.bpf.elf import ObjectError, read_object
from capsule.bpf.elf_sections import SectionType
from capsule.bpf.opcodes import Pseudo
from capsule.bpf.spec import ExternVar, ProgramSpec
from capsule.bpf.uapi import MapFlags, ProgType
from tests.clang import compile_bpf

INPUTS = Path(__file__).parent / "elf_inputs"
ARRAY, HASH, PROG_ARRAY, ARRAY_OF_MAPS, HASH_OF_MAPS = 2, 1, 3, 12, 13


def map_refs(prog: ProgramSpec) -> set[str]:
    return {i.ref for i in prog.insns if i.is_ld_imm64 and i.src == Pseudo.MAP_FD and i.ref}


# -- legacy maps ------------------------------------------------------------------------------------------------
def test_legacy_maps_section() -> None:
    spec = read_object(compile_bpf(INPUTS / "legacy_maps.c"))
    shapes = {n: (m.type, m.key_size, m.value_size, m.max_entries, m.flags) for n, m in spec.maps.items()}
    assert shapes == {
        "counts": (ARRAY, 4, 8, 4, 0),
        "flows": (HASH, 8, 4, 128, 1),  # BPF_F_NO_PREALLOC
        "hidden": (ARRAY, 4, 4, 2, 0),  # static: clang relocates it through the section symbol
    }
    assert all(m.section is None and m.btf_key_type_id == 0 for m in spec.maps.values())
    assert map_refs(spec.programs["legacy"]) == {"counts", "flows", "hidden"}


LEGACY = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct def {{ unsigned int f[{n}]; }};
struct def SEC("maps") a = {{ .f = {{ BPF_MAP_TYPE_ARRAY, 4, 4, 1{extra} }} }};
struct def SEC("maps") b = {{ .f = {{ BPF_MAP_TYPE_ARRAY, 4, 8, 2 }} }};
SEC("socket") int p(void *ctx) {{ __u32 k = 0; return bpf_map_lookup_elem(&a, &k) != bpf_map_lookup_elem(&b, &k); }}
char LICENSE[] SEC("license") = "GPL";
"""


def test_legacy_map_with_four_fields() -> None:
    spec = read_object(compile_bpf(LEGACY.format(n=4, extra="")))
    assert (spec.maps["a"].value_size, spec.maps["b"].max_entries, spec.maps["b"].flags) == (4, 2, 0)


def test_legacy_map_extra_field_set_is_refused() -> None:
    with pytest.raises(ObjectError, match=r"map 'a' sets field #6 \(offset 24\) to 3"):
        read_object(compile_bpf(LEGACY.format(n=7, extra=", 0, 0, 3")))


def test_legacy_map_definition_too_small() -> None:
    with pytest.raises(ObjectError, match="12 bytes are not struct bpf_map_def"):
        src = LEGACY.format(n=3, extra="").replace(", 4, 4, 1", ", 4, 4").replace(", 4, 8, 2", ", 4, 8")
        read_object(compile_bpf(src))


# -- map-in-map, program arrays ---------------------------------------------------------------------------------
def test_map_in_map_inner_definitions_and_slots() -> None:
    spec = read_object(compile_bpf(INPUTS / "map_in_map.c"))
    outer, by_id, jumps = spec.maps["outer"], spec.maps["by_id"], spec.maps["jumps"]
    assert (outer.type, outer.key_size, outer.value_size, outer.max_entries) == (ARRAY_OF_MAPS, 4, 4, 4)
    assert outer.inner is not None and outer.inner.name == "outer.inner"
    assert (outer.inner.type, outer.inner.key_size, outer.inner.value_size, outer.inner.max_entries) == (ARRAY, 4, 8, 2)
    assert outer.init_refs == {1: "inner_a", 3: "inner_b"}
    assert by_id.type == HASH_OF_MAPS and by_id.inner is not None and by_id.init_refs == {}
    assert (by_id.inner.type, by_id.inner.value_size, by_id.inner.max_entries) == (HASH, 4, 16)
    # a program array's values are programs: value_size 4 (a prog fd), no inner map
    assert (jumps.type, jumps.key_size, jumps.value_size, jumps.inner) == (PROG_ARRAY, 4, 4, None)
    assert jumps.init_refs == {2: "tail"}
    assert spec.maps["inner_a"].inner is None and spec.maps["inner_a"].init_refs == {}


def test_values_on_a_plain_map_is_refused() -> None:
    src = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1); __type(key, int);
         __array(values, struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
                                  __type(key, int); __type(value, int); }); } bad SEC(".maps");
SEC("socket") int p(void *ctx) { int k = 0; return bpf_map_lookup_elem(&bad, &k) != 0; }
char LICENSE[] SEC("license") = "GPL";
"""
    with pytest.raises(ObjectError, match="map 'bad': 'values' is only for map-in-map and program-array maps"):
        read_object(compile_bpf(src))


# -- extern variables -------------------------------------------------------------------------------------------
def test_externs_and_kconfig_layout() -> None:
    spec = read_object(compile_bpf(INPUTS / "externs.c"))
    prog = spec.programs["externs"]
    kinds = {n: (e.kind, e.weak) for n, e in prog.externs.items()}
    assert kinds == {
        "LINUX_KERNEL_VERSION": ("kconfig", False), "LINUX_HAS_BPF_COOKIE": ("kconfig", False),
        "CONFIG_HZ": ("kconfig", False), "CONFIG_BPF_SYSCALL": ("kconfig", False),
        "CONFIG_BPF_JIT": ("kconfig", False), "CONFIG_LOCALVERSION": ("kconfig", True),
        "CONFIG_CAPSULE_NO_SUCH_OPTION": ("kconfig", True),
        "__start_BTF": ("kallsyms", False), "capsule_no_such_symbol": ("kallsyms", True),
    }
    # every extern stays symbolic in the instructions: the loader resolves it
    loaded = {i.ref for i in prog.insns if i.is_ld_imm64 and i.src == Pseudo.BTF_ID}
    assert loaded == set(kinds)
    kc = spec.maps[".kconfig"]
    assert kc.type == ARRAY and kc.max_entries == 1 and kc.freeze
    assert kc.flags == MapFlags.MMAPABLE | MapFlags.RDONLY_PROG
    layout = {v.name: (v.kind, v.size) for v in kc.kconfig}
    assert layout["CONFIG_BPF_SYSCALL"] == ("bool", 1) and layout["CONFIG_BPF_JIT"] == ("tristate", 4)
    assert layout["CONFIG_LOCALVERSION"] == ("char_array", 16) and layout["CONFIG_HZ"] == ("int", 4)
    spans = sorted((v.offset, v.offset + v.size) for v in kc.kconfig)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), "kconfig values overlap"
    assert spans[-1][1] <= kc.value_size
    for v in kc.kconfig:
        assert v.offset % (1 if v.kind == "char_array" else v.size) == 0
        assert prog.externs[v.name].offset == v.offset


def test_extern_without_btf_declaration_is_a_typed_ksym() -> None:
    src = """extern const int some_kernel_var __attribute__((weak));
__attribute__((section("socket"), used)) int p(void *ctx) { return &some_kernel_var != 0; }
char LICENSE[] __attribute__((section("license"), used)) = "GPL";
"""
    spec = read_object(compile_bpf(src))
    assert spec.programs["p"].externs == {"some_kernel_var": ExternVar("some_kernel_var", "ksym", weak=True)}
    assert ".kconfig" not in spec.maps


# -- sections ---------------------------------------------------------------------------------------------------
SECTIONS = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("?tc") int later(void *ctx) { return 0; }
SEC("filter") int own(void *ctx) { return 0; }
SEC("?filter") int own_later(void *ctx) { return 0; }
SEC("tc") int now(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
"""


def test_autoload_and_sections_of_the_objects_own_loader() -> None:
    spec = read_object(compile_bpf(SECTIONS))
    p = spec.programs
    assert (p["later"].type, p["later"].autoload) == (ProgType.SCHED_CLS, False)
    assert (p["now"].type, p["now"].autoload) == (ProgType.SCHED_CLS, True)
    assert p["own"].type == ProgType.UNSPEC and not p["own_later"].autoload
    spec = read_object(compile_bpf(SECTIONS), section_types={"filter": SectionType(ProgType.SOCKET_FILTER)})
    p = spec.programs
    assert (p["own"].type, p["own"].autoload) == (ProgType.SOCKET_FILTER, True)
    assert (p["own_later"].type, p["own_later"].autoload) == (ProgType.SOCKET_FILTER, False)
    assert (p["later"].type, p["now"].type) == (ProgType.SCHED_CLS, ProgType.SCHED_CLS)
