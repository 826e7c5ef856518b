"""capsule.bpf.elf_write: objects written by capsule read back the same, and libbpf (bpftool) loads them.

Interop is the point: every written object goes through ``bpftool prog loadall`` (libbpf's ELF loader, the
real verifier) and ``bpftool btf dump file`` (BTF well-formedness), and the pin directory is always removed.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.btf_types import Func, Kind, Linkage
from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import object_bytes, write_object
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import LD_IMM64, CallKind, Pseudo
from capsule.bpf.spec import MapSpec, ObjectSpec, ProgramSpec
from tests.clang import CORPUS, compile_bpf
from tests.leaks import pin_path

INPUTS = Path(__file__).parent / "elf_inputs"
EXAMPLE = Path(__file__).parents[2] / "capsule" / "examples" / "packet_stats.bpf.c"
BPFTOOL = shutil.which("bpftool") or "/usr/sbin/bpftool"


def bpftool_loadall(obj: Path) -> list[str]:
    """Load every program of ``obj`` with bpftool; returns the pinned program names. Always unpins."""
    if not os.path.ismount("/sys/fs/bpf"):
        subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    pin = pin_path(uuid.uuid4().hex[:12])
    try:
        res = subprocess.run([BPFTOOL, "prog", "loadall", str(obj), str(pin)], capture_output=True, text=True)
        assert res.returncode == 0, f"bpftool loadall {obj.name} failed:\n{res.stderr[-4000:]}"
        return sorted(os.listdir(pin))
    finally:
        subprocess.run(["rm", "-rf", str(pin)], check=True)


def bpftool_btf_dump(obj: Path) -> str:
    res = subprocess.run([BPFTOOL, "btf", "dump", "file", str(obj)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def same_code(a: ProgramSpec, b: ProgramSpec) -> bool:
    key = [(i.code, i.dst, i.src, i.off, i.imm, i.ref) for i in a.insns]
    return key == [(i.code, i.dst, i.src, i.off, i.imm, i.ref) for i in b.insns]


def symbols(data: bytes) -> dict[str, tuple[str, str, str]]:
    elf = ELFFile(io.BytesIO(data))
    out = {}
    for s in elf.get_section_by_name(".symtab").iter_symbols():
        if s.name:
            sec = elf.get_section(s["st_shndx"]).name if isinstance(s["st_shndx"], int) else s["st_shndx"]
            out[s.name] = (s["st_info"]["type"], s["st_info"]["bind"], sec)
    return out


# -- read -> write -> read ---------------------------------------------------------------------------------
ROUNDTRIP = ["maps_data", "kfunc_arena", "kinds"]


@pytest.mark.parametrize("name", ROUNDTRIP + ["example"])
def test_rewrite_reads_back_identically(name: str, tmp_path: Path) -> None:
    src = EXAMPLE if name == "example" else INPUTS / f"{name}.c"
    spec = read_object(compile_bpf(src))
    out = tmp_path / f"{name}.o"
    write_object(spec, out)
    again = read_object(out)
    assert again.programs.keys() == spec.programs.keys()
    for n, p in spec.programs.items():
        q = again.programs[n]
        assert same_code(p, q), n
        assert (q.section, q.type, q.flags, q.expected_attach_type) == (
            p.section,
            p.type,
            p.flags,
            p.expected_attach_type,
        )
        assert q.func_infos == p.func_infos and q.line_infos == p.line_infos
    for n, m in spec.maps.items():
        m2 = again.maps[n]
        assert (
            m2.type,
            m2.key_size,
            m2.value_size,
            m2.max_entries,
            m2.flags,
            m2.map_extra,
            m2.contents,
            m2.freeze,
        ) == (m.type, m.key_size, m.value_size, m.max_entries, m.flags, m.map_extra, m.contents, m.freeze), n
    assert again.license == spec.license


def test_shared_subprograms_written_once(tmp_path: Path) -> None:
    spec = read_object(compile_bpf(INPUTS / "maps_data.c"))
    data = object_bytes(spec)
    syms = symbols(data)
    assert syms["mix"] == ("STT_FUNC", "STB_LOCAL", ".text")
    assert syms["global_add"] == ("STT_FUNC", "STB_GLOBAL", ".text")
    assert syms["prog_one"][2] == syms["prog_two"][2] == "xdp"
    elf = ELFFile(io.BytesIO(data))
    assert elf.get_section_by_name(".text")["sh_size"] == (6 + 4) * 8  # global_add + mix, once each


@pytest.mark.parametrize("name", ROUNDTRIP + ["example"])
def test_writing_leaves_the_spec_as_it_was(name: str) -> None:
    """The writer shares the program's instructions instead of copying them: it must never change them."""
    src = EXAMPLE if name == "example" else INPUTS / f"{name}.c"
    spec = read_object(compile_bpf(src))
    before = {n: [repr(i) for i in p.insns] for n, p in spec.programs.items()}
    first = object_bytes(spec)
    assert {n: [repr(i) for i in p.insns] for n, p in spec.programs.items()} == before
    assert object_bytes(spec) == first


@pytest.mark.requires_bpf
@pytest.mark.parametrize("name", ROUNDTRIP + ["example"])
def test_rewritten_clang_objects_load_with_bpftool(name: str, tmp_path: Path) -> None:
    src = EXAMPLE if name == "example" else INPUTS / f"{name}.c"
    spec = read_object(compile_bpf(src))
    if name == "maps_data":
        del spec.programs["prog_tp"]  # tracepoint attach needs perf events; loading is what we test
    out = tmp_path / f"{name}.o"
    write_object(spec, out)
    assert bpftool_loadall(out) == sorted(spec.programs)
    bpftool_btf_dump(out)


@pytest.mark.requires_bpf
def test_corpus_rewrites_load(tmp_path: Path) -> None:
    """Every corpus object that libbpf loads as clang wrote it also loads after a capsule read/write."""
    checked = 0
    for src in sorted(CORPUS.glob("*.c")):
        obj = compile_bpf(src)
        try:
            bpftool_loadall(obj)
        except AssertionError:
            continue  # not loadable even as clang wrote it (e.g. needs attach targets); not our business
        out = tmp_path / f"{src.stem}.o"
        write_object(read_object(obj), out)
        bpftool_loadall(out)
        checked += 1
    assert checked >= 3


# -- built from scratch ------------------------------------------------------------------------------------
def mov64_imm(dst: int, imm: int) -> Insn:
    return Insn(0xB7, dst, 0, 0, imm)


def exit_() -> Insn:
    return Insn(0x95)


def scratch_spec() -> ObjectSpec:
    """A hash-map counter in XDP, global data in .data/.rodata/.bss, a static subprogram, and a sleepable
    SYSCALL program that allocates arena pages through a kfunc — no BTF given."""
    xdp = [
        Insn(0x62, 10, 0, -4, 0),  # *(u32 *)(r10 - 4) = 0
        Insn(0xBF, 2, 10),  # r2 = r10
        Insn(0x07, 2, 0, 0, -4),  # r2 += -4
        Insn(LD_IMM64, 1, Pseudo.MAP_FD, ref="counts"),  # r1 = &counts
        Insn(0x85, 0, 0, 0, 1),  # call bpf_map_lookup_elem
        Insn(0x15, 0, 0, 2, 0),  # if r0 == 0 goto +2
        mov64_imm(1, 1),  # r1 = 1
        Insn(0xDB, 0, 1, 0, 0),  # lock *(u64 *)(r0 + 0) += r1
        Insn(LD_IMM64, 1, Pseudo.MAP_VALUE, imm=4 << 32, ref=".data"),  # r1 = &.data + 4
        Insn(0x61, 1, 1, 0, 0),  # r1 = *(u32 *)(r1 + 0)
        Insn(0x85, 0, CallKind.BPF, 0, 7),  # call bump (slot 20 = 13 + 7)
        Insn(LD_IMM64, 2, Pseudo.MAP_VALUE, imm=0, ref=".bss"),
        Insn(0x7B, 2, 0, 0, 0),  # *(u64 *)(r2 + 0) = r0
        Insn(LD_IMM64, 2, Pseudo.MAP_VALUE, imm=0, ref=".rodata"),
        Insn(0x61, 0, 2, 0, 0),  # r0 = *(u32 *)(r2 + 0)  (XDP_PASS from .rodata)
        exit_(),
        Insn(0xBF, 0, 1, sym="bump"),  # bump: r0 = r1
        Insn(0x07, 0, 0, 0, 1),  # r0 += 1
        exit_(),
    ]
    sys_ = [
        Insn(LD_IMM64, 1, Pseudo.MAP_FD, ref="arena"),
        mov64_imm(2, 0),
        Insn(0xB4, 3, 0, 0, 1),  # w3 = 1
        Insn(0xB4, 4, 0, 0, -1),  # w4 = -1 (NUMA_NO_NODE)
        mov64_imm(5, 0),
        Insn(0x85, 0, CallKind.KFUNC, 0, 0, ref="bpf_arena_alloc_pages"),
        mov64_imm(0, 0),
        exit_(),
    ]
    maps = {
        "counts": MapSpec("counts", 1, 4, 8, 64),
        "arena": MapSpec("arena", 33, 0, 0, 4, flags=1 << 10, map_extra=1 << 44),
        ".data": MapSpec(".data", 2, 4, 8, 1, flags=1 << 10, contents=bytes(range(8)), section=".data"),
        ".rodata": MapSpec(
            ".rodata",
            2,
            4,
            4,
            1,
            flags=(1 << 10) | (1 << 7),
            contents=b"\x02\0\0\0",
            freeze=True,
            section=".rodata",
        ),
        ".bss": MapSpec(".bss", 2, 4, 8, 1, flags=1 << 10, contents=bytes(8), section=".bss"),
    }
    progs = {
        "count": ProgramSpec("count", "xdp", 6, xdp, expected_attach_type=37),
        "grow": ProgramSpec("grow", "syscall", 31, sys_, flags=1 << 4),
    }
    return ObjectSpec(programs=progs, maps=maps, btf=None, license="GPL")


def test_scratch_object_reads_back(tmp_path: Path) -> None:
    spec = scratch_spec()
    out = tmp_path / "scratch.o"
    write_object(spec, out)
    again = read_object(out)
    for n, p in spec.programs.items():
        assert same_code(p, again.programs[n]), n
    count = again.programs["count"]
    assert [again.btf.type_by_id(f.type_id).name for f in count.func_infos] == ["count", "bump"]
    assert [f.insn_off for f in count.func_infos] == [0, 20]
    bump = again.btf.find("bump", Kind.FUNC)
    assert isinstance(bump, Func) and bump.linkage == Linkage.STATIC
    assert again.maps["counts"].key_size == 4 and again.maps["counts"].value_size == 8
    assert again.maps["arena"].map_extra == 1 << 44 and again.maps["arena"].type == 33
    assert again.maps[".data"].contents == bytes(range(8)) and again.maps[".rodata"].freeze
    kf = again.btf.find("bpf_arena_alloc_pages", Kind.FUNC)
    assert kf.linkage == Linkage.EXTERN and len(again.btf.type_by_id(kf.type).params) == 5


@pytest.mark.requires_bpf
def test_scratch_object_loads_with_bpftool(tmp_path: Path) -> None:
    out = tmp_path / "scratch.o"
    write_object(scratch_spec(), out)
    assert bpftool_loadall(out) == ["count", "grow"]
    dump = bpftool_btf_dump(out)
    assert "DATASEC '.maps'" in dump and "FUNC 'count'" in dump and "DATASEC '.rodata'" in dump


@pytest.mark.requires_bpf
def test_global_subprogram_with_btf(tmp_path: Path) -> None:
    """A code generator's global function: its FUNC/FUNC_PROTO (named scalar params) come from spec.btf."""
    from capsule.bpf.btf import BTF
    from capsule.bpf.spec import FuncInfo

    btf = BTF()
    i64 = btf.add_int("long long", 8, signed=True)
    main = btf.add_func("main_prog", btf.add_func_proto(i64, [("ctx", btf.add_ptr(0))]), Linkage.GLOBAL)
    helper = btf.add_func(
        "add3", btf.add_func_proto(i64, [("a", i64), ("b", i64), ("c", i64)]), Linkage.GLOBAL
    )
    insns = [
        mov64_imm(1, 1),
        mov64_imm(2, 2),
        mov64_imm(3, 3),
        Insn(0x85, 0, CallKind.BPF, 0, 1),
        exit_(),
        Insn(0xBF, 0, 1),
        Insn(0x0F, 0, 2),
        Insn(0x0F, 0, 3),
        exit_(),
    ]
    prog = ProgramSpec(
        "main_prog", "syscall", 31, insns, flags=1 << 4, func_infos=[FuncInfo(0, main), FuncInfo(5, helper)]
    )
    out = tmp_path / "global.o"
    write_object(ObjectSpec(programs={"main_prog": prog}, btf=btf), out)
    assert symbols(out.read_bytes())["add3"] == ("STT_FUNC", "STB_GLOBAL", ".text")
    assert bpftool_loadall(out) == ["main_prog"]


def test_bad_references_are_reported() -> None:
    spec = scratch_spec()
    spec.programs["count"].insns[3] = Insn(LD_IMM64, 1, Pseudo.MAP_FD, ref="nope")
    with pytest.raises(ValueError, match="unknown map 'nope'"):
        object_bytes(spec)
    spec = scratch_spec()
    spec.programs["grow"].insns[5] = Insn(0x85, 0, CallKind.KFUNC, 0, 0, ref="no_such_kfunc_xyz")
    with pytest.raises(ValueError, match="no_such_kfunc_xyz"):
        object_bytes(spec)


@pytest.mark.requires_bpf
def test_extra_sections_roundtrip_and_still_load(tmp_path: Path) -> None:
    """Non-allocated ``.capsule*`` sections (the compiler's metadata) survive write/read and do not bother libbpf."""
    spec = scratch_spec()
    spec.extra_sections = {".capsule.meta": b'{"version": 1}', ".capsule.empty": b""}
    out = tmp_path / "extra.o"
    write_object(spec, out)
    assert read_object(out).extra_sections == spec.extra_sections
    assert bpftool_loadall(out) == ["count", "grow"]
