"""capsule.bpf.btf / btf_types / btf_ext: parse, encode, look up, build, and make object BTF kernel-loadable.

Round trips are checked against clang-19's own .BTF/.BTF.ext and the running kernel's vmlinux BTF; "the kernel
accepts it" is checked with a raw BPF_BTF_LOAD (tests/bpf/btf_load.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.btf import BTF, BTFError, StringTable
from capsule.bpf.btf_ext import BTFExt
from capsule.bpf.btf_types import (
    Array,
    Datasec,
    Enum,
    Enum64,
    Func,
    FuncProto,
    Fwd,
    Int,
    Kind,
    Linkage,
    Ptr,
    Struct,
    Typedef,
    Union,
    Var,
)
from tests.bpf.btf_load import kernel_accepts_btf
from tests.clang import CORPUS, compile_bpf

INPUTS = Path(__file__).parent / "elf_inputs"
EXAMPLE = Path(__file__).parents[2] / "capsule" / "examples" / "packet_stats.bpf.c"


def sections(obj: Path) -> tuple[bytes, bytes | None]:
    with open(obj, "rb") as f:
        elf = ELFFile(f)
        ext = elf.get_section_by_name(".BTF.ext")
        return elf.get_section_by_name(".BTF").data(), ext.data() if ext is not None else None


def objects() -> list[Path]:
    srcs = sorted(INPUTS.glob("*.c")) + [EXAMPLE] + sorted(CORPUS.glob("*.c"))
    return [compile_bpf(s) for s in srcs]


@pytest.fixture(scope="module")
def kinds_btf() -> BTF:
    return BTF.parse(sections(compile_bpf(INPUTS / "kinds.c"))[0])


@pytest.fixture(scope="module")
def vmlinux() -> BTF:
    t = time.perf_counter()
    btf = BTF.load_vmlinux()
    print(f"vmlinux BTF: {len(btf)} types parsed in {time.perf_counter() - t:.3f} s")
    return btf


# -- round trips ------------------------------------------------------------------------------------------
def test_roundtrip_identity_on_clang_output() -> None:
    objs = objects()
    assert len(objs) >= 4
    for obj in objs:
        btf_data, ext_data = sections(obj)
        btf = BTF.parse(btf_data)
        assert btf.encode() == btf_data, obj.name
        # decoding every type and encoding again still gives the same bytes
        assert all(t is not None for t in btf.iter_types())
        assert btf.encode() == btf_data
        if ext_data is not None:
            assert BTFExt.parse(ext_data, btf.strings).encode(btf.strings) == ext_data, obj.name


def test_every_kind_is_decoded(kinds_btf: BTF) -> None:
    kinds = {t.kind for t in kinds_btf.iter_types()}
    assert kinds == set(Kind) - {Kind.UNKN}


def test_decoded_details(kinds_btf: BTF) -> None:
    bits = kinds_btf.find("bits", Kind.STRUCT)
    assert isinstance(bits, Struct) and bits.kind_flag == 1 and bits.size == 8
    a, b, c = bits.members
    assert (bits.bit_offset(a), bits.bitfield_size(a)) == (0, 3)
    assert (bits.bit_offset(b), bits.bitfield_size(b)) == (3, 5)
    assert (bits.bit_offset(c), bits.bitfield_size(c)) == (32, 0)
    small = kinds_btf.find("small", Kind.ENUM)
    assert isinstance(small, Enum) and {v.name: v.value for v in small.values} == {"S_NEG": -1, "S_ONE": 1}
    big = kinds_btf.find("big", Kind.ENUM64)
    assert isinstance(big, Enum64) and big.values[0].value == 1 << 40
    assert isinstance(kinds_btf.find("either"), Union)
    assert isinstance(kinds_btf.find("unknown", Kind.FWD), Fwd)
    tag = kinds_btf.find("member_tag", Kind.DECL_TAG)
    assert tag.component_idx == 0 and kinds_btf.type_by_id(tag.type).name == "tagged"
    u32 = kinds_btf.find_id("u32_t", Kind.TYPEDEF)
    assert isinstance(kinds_btf.resolve(u32), Int) and kinds_btf.size_of(u32) == 4
    holder = kinds_btf.find("holder", Kind.STRUCT)
    arr = kinds_btf.resolve(holder.member("arr").type)
    assert isinstance(arr, Array) and arr.nelems == 3
    assert kinds_btf.size_of(kinds_btf.find_id("holder")) == holder.size
    cv = holder.member("cv").type
    assert kinds_btf.type_by_id(cv).kind in (Kind.CONST, Kind.VOLATILE)
    assert kinds_btf.size_of(cv) == 4
    fn = kinds_btf.resolve(kinds_btf.resolve(holder.member("fn").type).type)
    assert isinstance(fn, FuncProto) and len(fn.params) == 2
    loop = kinds_btf.find("loop", Kind.FUNC)
    assert isinstance(loop, Func) and loop.linkage == Linkage.GLOBAL
    with pytest.raises(BTFError, match="no BTF FUNC type named 'nope'"):
        kinds_btf.find("nope", Kind.FUNC)
    with pytest.raises(BTFError, match="out of range"):
        kinds_btf.type_by_id(10**6)


def test_btf_ext_offsets_are_slots() -> None:
    btf_data, ext_data = sections(compile_bpf(INPUTS / "maps_data.c"))
    btf = BTF.parse(btf_data)
    ext = BTFExt.parse(ext_data, btf.strings)
    xdp = ext.func_info["xdp"]
    assert [btf.type_by_id(f.type_id).name for f in xdp] == ["prog_one", "prog_two"]
    assert xdp[0].insn_off == 0 and xdp[1].insn_off == 32  # prog_two starts at byte 256
    assert ext.line_info["xdp"][0].insn_off == 0 and ext.line_info["xdp"][0].line > 0
    assert btf.strings.get(ext.line_info["xdp"][0].file_name_off).endswith(".c")


# -- vmlinux ----------------------------------------------------------------------------------------------
def test_vmlinux_find_kfunc(vmlinux: BTF) -> None:
    assert len(vmlinux) > 10_000
    t = time.perf_counter()
    fid = vmlinux.find_id("bpf_arena_alloc_pages", Kind.FUNC)
    print(f"name index + lookup: {time.perf_counter() - t:.3f} s")
    f = vmlinux.type_by_id(fid)
    assert isinstance(f, Func)
    proto = vmlinux.type_by_id(f.type)
    assert isinstance(proto, FuncProto)
    assert [p.name for p in proto.params][:3] == ["p__map", "addr__ign", "page_cnt"]
    assert vmlinux.size_of(proto.params[2].type) == 4
    task = vmlinux.find("task_struct", Kind.STRUCT)
    assert task.size > 1000 and task.member("pid") is not None


def test_vmlinux_roundtrip(vmlinux: BTF) -> None:
    data = Path("/sys/kernel/btf/vmlinux").read_bytes()
    assert vmlinux.encode() == data


# -- building ---------------------------------------------------------------------------------------------
@pytest.mark.requires_bpf
def test_builder_roundtrip_and_kernel_load() -> None:
    b = BTF()
    i32 = b.add_int("int", 4, signed=True)
    u64 = b.add_int("unsigned long long", 8)
    assert b.int_id(4, signed=True) == i32 and b.int_id(8) == u64
    ptr = b.add_ptr(i32)
    arr = b.add_array(u64, 4)
    st = b.add_struct("pair", 16, [("a", i32, 0), ("b", u64, 64)])
    td = b.add_typedef("pair_t", st)
    proto = b.add_func_proto(i32, [("x", i32), ("p", ptr)])
    fn = b.add_func("f", proto, Linkage.GLOBAL)
    var = b.add_var("counter", u64)
    sec = b.add_datasec(".bss", 8, [(var, 0, 8)])
    assert [fn, var, sec] == [td + 2, td + 3, td + 4]
    data = b.encode()
    again = BTF.parse(data)
    assert again.encode() == data
    assert again.find("pair_t", Kind.TYPEDEF).type == st
    assert again.size_of(td) == 16 and again.size_of(arr) == 32
    assert isinstance(again.type_by_id(sec), Datasec)
    ok, log = kernel_accepts_btf(data)
    assert ok, log


def test_string_table_reuses_and_appends() -> None:
    s = StringTable(b"\0abc\0de\0")
    assert s.get(1) == "abc" and s.get(5) == "de" and s.add("de") == 5
    assert s.add("new") == 8 and bytes(s) == b"\0abc\0de\0new\0"
    with pytest.raises(BTFError):
        StringTable(b"x\0")
    with pytest.raises(BTFError):
        s.get(100)


@pytest.mark.requires_bpf
def test_copy_type_from_vmlinux(vmlinux: BTF) -> None:
    b = BTF()
    f = vmlinux.find("bpf_arena_alloc_pages", Kind.FUNC)
    pid = b.copy_type(vmlinux, f.type)
    proto = b.type_by_id(pid)
    assert isinstance(proto, FuncProto) and len(proto.params) == 5
    assert len(b) < 20  # structs are cut, not dragged in whole
    assert kernel_accepts_btf(b.encode())[0]


# -- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, msg",
    [
        (b"\x9f\xeb\x01", "too short"),
        (b"\x00\x00" + bytes(22), "bad BTF magic"),
    ],
)
def test_parse_errors(data: bytes, msg: str) -> None:
    with pytest.raises(BTFError, match=msg):
        BTF.parse(data)


def test_parse_truncated_types(kinds_btf: BTF) -> None:
    data = kinds_btf.encode()
    import struct

    hdr = list(struct.unpack_from("<HBBIIIII", data))
    hdr[5] -= 6  # type_len no longer ends on a record boundary
    with pytest.raises(BTFError, match="runs past|truncated"):
        BTF.parse(struct.pack("<HBBIIIII", *hdr) + data[24:])


# -- kernel fix-ups ---------------------------------------------------------------------------------------
@pytest.mark.requires_bpf
def test_for_kernel_makes_object_btf_loadable() -> None:
    """Raw clang BTF with kfunc externs is refused by the kernel; for_kernel's output is accepted."""
    btf_data, _ = sections(compile_bpf(INPUTS / "kfunc_arena.c"))
    ok, log = kernel_accepts_btf(btf_data)
    assert not ok  # extern FUNC in a DATASEC, DATASEC size 0
    btf = BTF.parse(btf_data)
    fixed = btf.for_kernel({".bss": 8, ".maps": 32, "license": 4}, {"got": 0, "arena": 0, "LICENSE": 0})
    ok, log = kernel_accepts_btf(fixed)
    assert ok, log
    out = BTF.parse(fixed)
    alloc = out.find("bpf_arena_alloc_pages", Kind.FUNC)
    assert alloc.linkage == Linkage.GLOBAL
    assert all(p.name for p in out.type_by_id(alloc.type).params)
    ksyms = out.find(".ksyms", Kind.DATASEC)
    assert all(isinstance(out.type_by_id(v.type), Var) for v in ksyms.vars) and ksyms.size == 8
    assert out.find(".bss", Kind.DATASEC).size == 8
    # the original object is untouched
    assert btf.encode() == btf_data


@pytest.mark.requires_bpf
def test_for_kernel_on_all_clang_objects() -> None:
    for obj in objects():
        with open(obj, "rb") as f:
            elf = ELFFile(f)
            sizes = {s.name: s["sh_size"] for s in elf.iter_sections()}
            offs = {
                s.name: s["st_value"]
                for s in elf.get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] == "STT_OBJECT"
            }
            data = elf.get_section_by_name(".BTF").data()
        ok, log = kernel_accepts_btf(BTF.parse(data).for_kernel(sizes, offs))
        assert ok, f"{obj.name}: {log}"


def test_ptr_and_typedef_resolution(kinds_btf: BTF) -> None:
    holder = kinds_btf.find("holder", Kind.STRUCT)
    p = kinds_btf.resolve(holder.member("fwd").type)
    assert isinstance(p, Ptr) and kinds_btf.size_of(holder.member("fwd").type) == 8
    assert isinstance(kinds_btf.type_by_id(p.type), Fwd)
    with pytest.raises(BTFError, match="has no size"):
        kinds_btf.size_of(p.type)
    assert isinstance(kinds_btf.find("u32_t"), Typedef)
