"""capsule.bpf.elf: clang-19 objects become ObjectSpecs the way libbpf sees them; bad input: ObjectError."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.btf import BTF
from capsule.bpf.btf_types import Datasec, Func, Kind
from capsule.bpf.elf import ObjectError, read_object
from capsule.bpf.elf_sections import BPF_F_SLEEPABLE, BPF_F_XDP_HAS_FRAGS, AttachType, ProgType, section_type
from capsule.bpf.insn import Insn, slot_offsets
from capsule.bpf.opcodes import CallKind, Pseudo
from capsule.bpf.spec import ProgramSpec
from tests.clang import CORPUS, compile_bpf

INPUTS = Path(__file__).parent / "elf_inputs"


@pytest.fixture(scope="module")
def maps_data() -> Path:
    return compile_bpf(INPUTS / "maps_data.c")


def target_of(prog: ProgramSpec, i: int) -> Insn:
    """The instruction a call / function-address ld_imm64 at index i points to."""
    offs = slot_offsets(prog.insns)
    ins = prog.insns[i]
    rel = ins.imm if ins.is_call else ins.imm - (1 << 32) if ins.imm & 0x80000000 else ins.imm
    return prog.insns[offs.index(offs[i] + rel + 1)]


def calls(prog: ProgramSpec) -> list[tuple[int, str | None]]:
    return [
        (i, target_of(prog, i).sym)
        for i, ins in enumerate(prog.insns)
        if (ins.is_call and ins.src == CallKind.BPF) or (ins.is_ld_imm64 and ins.src == Pseudo.FUNC)
    ]


# -- programs ---------------------------------------------------------------------------------------------
def test_programs_and_sections(maps_data: Path) -> None:
    spec = read_object(maps_data)
    assert set(spec.programs) == {"prog_one", "prog_two", "prog_sys", "prog_tp"}
    one, two, sys_, tp = (spec.programs[n] for n in ("prog_one", "prog_two", "prog_sys", "prog_tp"))
    assert one.section == two.section == "xdp"
    assert (one.type, one.expected_attach_type, one.flags) == (ProgType.XDP, AttachType.XDP, 0)
    assert (sys_.type, sys_.flags) == (ProgType.SYSCALL, BPF_F_SLEEPABLE)
    assert (tp.type, tp.attach_to) == (ProgType.TRACEPOINT, "syscalls/sys_enter_getpid")
    assert spec.license == one.license == "Dual BSD/GPL"
    assert isinstance(spec.btf, BTF)


def test_subprograms_are_linked_after_the_entry(maps_data: Path) -> None:
    spec = read_object(maps_data)
    one = spec.programs["prog_one"]
    assert one.insns[0].sym == "prog_one"
    # prog_one calls mix (static) and global_add (global), which calls mix
    assert sorted(s for _, s in calls(one)) == ["global_add", "mix", "mix"]
    funcs = [i.sym for i in one.insns if i.sym]
    assert funcs[0] == "prog_one" and sorted(funcs[1:]) == ["global_add", "mix"]
    # each function appears once, and func_info marks exactly the function starts with the right FUNC types
    offs = slot_offsets(one.insns)
    starts = {offs[i]: ins.sym for i, ins in enumerate(one.insns) if ins.sym}
    assert {fi.insn_off: spec.btf.type_by_id(fi.type_id).name for fi in one.func_infos} == starts
    assert one.line_infos[0].insn_off == 0
    assert all(0 <= li.insn_off < offs[-1] + 2 for li in one.line_infos)
    # prog_two only reaches mix; prog_tp reaches nothing
    assert [s for _, s in calls(spec.programs["prog_two"])] == ["mix"]
    assert calls(spec.programs["prog_tp"]) == [] and len(spec.programs["prog_tp"].func_infos) == 1


def test_map_and_data_references(maps_data: Path) -> None:
    spec = read_object(maps_data)
    one = spec.programs["prog_one"]
    refs = [(i.src, i.ref, i.imm >> 32) for i in one.insns if i.ref]
    assert (Pseudo.MAP_FD, "pairs", 0) in refs
    assert (Pseudo.MAP_VALUE, ".data", 0) in refs
    assert (Pseudo.MAP_VALUE, ".rodata", 0) in refs
    assert (Pseudo.MAP_VALUE, ".bss", 0) in refs
    assert (Pseudo.MAP_VALUE, ".data.extra", 0) in refs
    for i in one.insns:
        if i.is_ld_imm64 and i.src == Pseudo.MAP_VALUE:
            assert i.imm & 0xFFFFFFFF == 0  # the loader fills the fd in the low word
        if i.is_ld_imm64 and i.src == Pseudo.MAP_FD:
            assert i.imm == 0
    tp = spec.programs["prog_tp"]
    assert [i.ref for i in tp.insns if i.ref] == ["events", ".bss"]


def test_data_offsets_in_high_word() -> None:
    spec = read_object(compile_bpf(INPUTS / "kinds.c"))
    loop = spec.programs["loop"]
    btf = spec.btf
    bss = btf.find(".bss", Kind.DATASEC)
    counted = next(v for v in bss.vars if btf.type_by_id(v.type).name == "counted")
    offsets = {i.imm >> 32 for i in loop.insns if i.ref == ".bss"}
    assert counted.offset in offsets and counted.offset > 0
    # clang relocates the static through the section symbol with the offset in the instruction
    seen = next(v for v in bss.vars if btf.type_by_id(v.type).name == "calls_seen")
    assert seen.offset in offsets and seen.offset != counted.offset
    # the bpf_loop callback: ld_imm64 src=FUNC pointing at 'step', with its func_info carried along
    assert [s for _, s in calls(loop)] == ["step"]
    names = {btf.type_by_id(fi.type_id).name for fi in loop.func_infos}
    assert names == {"loop", "step"}


def test_maps(maps_data: Path) -> None:
    spec = read_object(maps_data)
    m = spec.maps
    pairs = m["pairs"]
    assert (pairs.type, pairs.key_size, pairs.value_size, pairs.max_entries) == (2, 4, 16, 16)
    assert spec.btf.type_by_id(pairs.btf_value_type_id).name == "pair"
    assert spec.btf.size_of(pairs.btf_key_type_id) == 4
    sized = m["sized"]
    assert (sized.type, sized.key_size, sized.value_size, sized.max_entries, sized.flags) == (
        1,
        8,
        4,
        1024,
        1,
    )
    assert sized.btf_key_type_id == 0
    events = m["events"]
    assert (events.type, events.max_entries, events.key_size) == (27, 4096, 0)
    ro, data, bss, extra = m[".rodata"], m[".data"], m[".bss"], m[".data.extra"]
    assert ro.freeze and ro.contents == struct.pack("<I", 7) and ro.flags & (1 << 7)
    assert data.contents == struct.pack("<I", 0x1234) and not data.freeze
    assert bss.contents == bytes(8) and bss.value_size == 8
    assert extra.contents == struct.pack("<4I", 1, 2, 3, 4) and extra.section == ".data.extra"
    for d in (ro, data, bss, extra):
        assert (d.type, d.key_size, d.max_entries) == (2, 4, 1)
        ds = spec.btf.type_by_id(d.btf_value_type_id)
        assert isinstance(ds, Datasec) and ds.name == d.name and ds.size == d.value_size


def test_kfunc_and_arena() -> None:
    spec = read_object(compile_bpf(INPUTS / "kfunc_arena.c"))
    arena = spec.maps["arena"]
    assert (arena.type, arena.max_entries, arena.flags, arena.map_extra) == (33, 16, 1 << 10, 1 << 44)
    alloc = spec.programs["alloc"]
    kf = [(i.src, i.ref, i.imm) for i in alloc.insns if i.is_call and i.src == CallKind.KFUNC]
    assert kf == [(CallKind.KFUNC, "bpf_arena_alloc_pages", 0), (CallKind.KFUNC, "bpf_arena_free_pages", 0)]
    assert [i.ref for i in alloc.insns if i.src == Pseudo.MAP_FD] == ["arena", "arena"]


def test_corpus_objects_read() -> None:
    """Every corpus program reads, and every call lands on a function start."""
    srcs = sorted(CORPUS.glob("*.c"))
    assert srcs
    for src in srcs:
        spec = read_object(compile_bpf(src))
        assert spec.programs, src.name
        for p in spec.programs.values():
            starts = {i for i, ins in enumerate(p.insns) if ins.sym}
            for i, _ in calls(p):
                assert p.insns.index(target_of(p, i)) in starts, (src.name, p.name, i)
            if p.func_infos:
                assert len(p.func_infos) == len(starts)


def test_unknown_section_is_read_not_rejected() -> None:
    src = (
        '#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\nSEC("weird/thing") int w(void *c) '
        '{ return 0; }\nchar LICENSE[] SEC("license") = "GPL";\n'
    )
    spec = read_object(compile_bpf(src))
    assert spec.programs["w"].type == ProgType.UNSPEC and spec.programs["w"].section == "weird/thing"


@pytest.mark.parametrize(
    "name, expect",
    [
        ("xdp", (ProgType.XDP, AttachType.XDP, 0, "")),
        ("xdp.frags", (ProgType.XDP, AttachType.XDP, BPF_F_XDP_HAS_FRAGS, "")),
        ("syscall", (ProgType.SYSCALL, 0, BPF_F_SLEEPABLE, "")),
        ("socket", (ProgType.SOCKET_FILTER, 0, 0, "")),
        ("tc", (ProgType.SCHED_CLS, 0, 0, "")),
        ("classifier", (ProgType.SCHED_CLS, 0, 0, "")),
        ("tracepoint/sched/sched_switch", (ProgType.TRACEPOINT, 0, 0, "sched/sched_switch")),
        ("tp/sched/sched_switch", (ProgType.TRACEPOINT, 0, 0, "sched/sched_switch")),
        ("raw_tracepoint/sys_enter", (ProgType.RAW_TRACEPOINT, 0, 0, "sys_enter")),
        ("raw_tp/sys_enter", (ProgType.RAW_TRACEPOINT, 0, 0, "sys_enter")),
    ],
)
def test_section_types(name: str, expect: tuple) -> None:
    st = section_type(name)
    assert st is not None and (st.prog_type, st.expected_attach_type, st.flags, st.attach_to) == expect


def test_unknown_section_types() -> None:
    assert section_type("nope") is None and section_type("tracepoint/") is None


# -- bad input --------------------------------------------------------------------------------------------
def test_not_elf(tmp_path: Path) -> None:
    with pytest.raises(ObjectError, match="not an ELF file"):
        read_object(b"hello world, not an object")
    with pytest.raises(ObjectError, match="cannot read"):
        read_object(tmp_path / "missing.o")


def test_truncated(maps_data: Path) -> None:
    data = maps_data.read_bytes()
    for n in (10, 63, 200, len(data) // 2, len(data) - 100):
        with pytest.raises(ObjectError, match="<bytes>: (truncated|malformed)"):
            read_object(data[:n])


def test_x86_object(tmp_path: Path) -> None:
    src = tmp_path / "x.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    obj = tmp_path / "x.o"
    subprocess.run(
        [shutil.which("clang-19") or "clang-19", "-c", "-O2", str(src), "-o", str(obj)], check=True
    )
    with pytest.raises(ObjectError, match="EM_X86_64.*not EM_BPF"):
        read_object(obj)


def _rel_entries(data: bytes, secname: str) -> list[int]:
    """File offsets of the relocation entries of ``secname``."""
    import io

    elf = ELFFile(io.BytesIO(data))
    sec = elf.get_section_by_name(secname)
    return [sec["sh_offset"] + k * 16 for k in range(sec["sh_size"] // 16)]


def test_unknown_relocation_type(maps_data: Path) -> None:
    data = bytearray(maps_data.read_bytes())
    off = _rel_entries(bytes(data), ".relxdp")[0]
    data[off + 8 : off + 12] = struct.pack("<I", 77)  # r_info low word: the type
    with pytest.raises(ObjectError, match=r"unknown relocation type 77 in \.relxdp"):
        read_object(bytes(data))


def test_relocation_against_missing_symbol(maps_data: Path) -> None:
    data = bytearray(maps_data.read_bytes())
    off = _rel_entries(bytes(data), ".relxdp")[0]
    data[off + 12 : off + 16] = struct.pack("<I", 9999)  # r_info high word: the symbol index
    with pytest.raises(ObjectError, match="symbol #9999, which does not exist"):
        read_object(bytes(data))


def test_abs_relocation_in_code_is_named(maps_data: Path) -> None:
    data = bytearray(maps_data.read_bytes())
    off = _rel_entries(bytes(data), ".relxdp")[0]
    data[off + 8 : off + 12] = struct.pack("<I", 3)
    with pytest.raises(ObjectError, match="R_BPF_64_ABS32 not supported in code section xdp"):
        read_object(bytes(data))


def test_garbage_inside_elf(maps_data: Path) -> None:
    """Random corruption of section headers gives ObjectError, never a pyelftools traceback."""
    import random

    data = maps_data.read_bytes()
    rng = random.Random(7)
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    for _ in range(60):
        d = bytearray(data)
        for _ in range(4):
            p = rng.randrange(shoff, len(d))
            d[p] = rng.randrange(256)
        try:
            read_object(bytes(d))
        except ObjectError:
            pass


def test_kfunc_btf_is_in_object() -> None:
    spec = read_object(compile_bpf(INPUTS / "kfunc_arena.c"))
    f = spec.btf.find("bpf_arena_alloc_pages", Kind.FUNC)
    assert isinstance(f, Func)


@pytest.mark.requires_bpf
def test_object_btf_for_kernel_is_accepted_without_fd_leaks() -> None:
    """What the loader will do: read an object, then BPF_BTF_LOAD ``spec.btf.for_kernel()``."""
    import os

    from tests.bpf.btf_load import kernel_accepts_btf

    before = len(os.listdir("/proc/self/fd"))
    for src in [*sorted(INPUTS.glob("*.c")), *sorted(CORPUS.glob("*.c"))]:
        spec = read_object(compile_bpf(src))
        ok, log = kernel_accepts_btf(spec.btf.for_kernel())
        assert ok, f"{src.name}: {log}"
    assert len(os.listdir("/proc/self/fd")) == before
