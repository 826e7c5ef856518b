"""Loading what older and richer objects declare: legacy ``maps``, map-in-maps and program arrays with initial
slots, ``__kconfig`` / ``__ksym`` externs, ring buffers sized the libbpf way, libbpf's section names (probes,
cgroup and socket programs), ``SEC("?...")`` programs and ``__naked`` functions' BTF."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from capsule.bpf.btf_types import Func, FuncProto, Kind
from capsule.bpf.elf import read_object
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Pseudo
from capsule.bpf.spec import ExternVar, KconfigVar, MapSpec, ObjectSpec, ProgramSpec
from capsule.bpf.uapi import AttachType, ProgType
from capsule.kernel.btf import vmlinux_btf_id
from capsule.kernel.collection import Collection, LoadError, _ringbuf_size, create_maps, resolve_refs
from capsule.kernel.consts import MapType
from capsule.kernel.errors import VerifierError
from capsule.kernel.kconfig import kallsyms, kconfig_value, kernel_config, kernel_version
from capsule.kernel.maps import Map
from tests.clang import compile_bpf

INPUTS = Path(__file__).resolve().parents[1] / "bpf" / "elf_inputs"
PACKET = bytes(64)


@pytest.mark.requires_bpf
def test_legacy_maps_load_and_work() -> None:
    spec = read_object(compile_bpf(INPUTS / "legacy_maps.c"))
    with Collection.load(spec) as coll:
        for key, slot, value in ((0x1122, 1, 5), (0x3344, 1, 6), (0x1122, 2, 9)):
            coll.programs["legacy"].test_run(ctx_in=struct.pack("<QII", key, slot, value))
        m = coll.maps
        assert [struct.unpack("<Q", m["counts"].lookup(i))[0] for i in range(4)] == [0, 11, 9, 0]
        assert dict(m["flows"].items()) == {(0x1122).to_bytes(8, "little"): (9).to_bytes(4, "little"),
                                            (0x3344).to_bytes(8, "little"): (6).to_bytes(4, "little")}
        assert m["hidden"].lookup(1) == (10).to_bytes(4, "little")
        assert m["flows"].info().map_flags == 1


@pytest.mark.requires_bpf
def test_map_in_map_slots_and_inner_template() -> None:
    spec = read_object(compile_bpf(INPUTS / "map_in_map.c"))
    with Collection.load(spec) as coll:
        outer = coll.maps["outer"]
        # from user space a map-in-map slot reads as the inner map's id
        ids = {i: outer.lookup(i) for i in range(4)}
        assert ids[0] is None and ids[2] is None
        assert ids[1] == coll.maps["inner_a"].info().id.to_bytes(4, "little")
        assert ids[3] == coll.maps["inner_b"].info().id.to_bytes(4, "little")
        r = coll.programs["through_outer"].test_run(PACKET)
        assert r.retval == 0  # by_id has no slots
        assert coll.maps["inner_b"].lookup(0) == (5).to_bytes(8, "little")
        assert coll.maps["inner_a"].lookup(0) == bytes(8)
        # a HASH_OF_MAPS takes any map of its inner shape
        with Map.create(MapType.HASH, 4, 4, 16) as m:
            coll.maps["by_id"].update(0, m.fileno().to_bytes(4, "little"))
            assert coll.programs["through_outer"].test_run(PACKET).retval == 3


@pytest.mark.requires_bpf
def test_map_in_map_slot_with_a_map_of_another_shape_is_refused() -> None:
    # the template comes from the outer map's __array(values, ...): a slot map of another shape is refused
    spec = read_object(compile_bpf(INPUTS / "map_in_map.c"))
    inner_a = replace(spec.maps["inner_a"], value_size=16)
    bad = replace(spec, maps={**spec.maps, "inner_a": inner_a})
    with pytest.raises(OSError):
        create_maps(bad, None)


@pytest.mark.requires_bpf
def test_program_array_slots_are_filled_with_loaded_programs() -> None:
    spec = read_object(compile_bpf(INPUTS / "map_in_map.c"))
    with Collection.load(spec) as coll:
        assert coll.programs["entry"].test_run(PACKET).retval == 42
    with Collection.load(spec, programs=["entry"]) as coll:  # "tail" not loaded: its slot stays empty
        assert coll.programs["entry"].test_run(PACKET).retval == 7


@pytest.mark.requires_bpf
def test_externs_take_the_running_kernels_values() -> None:
    spec = read_object(compile_bpf(INPUTS / "externs.c"))
    with Collection.load(spec) as coll:
        coll.programs["externs"].test_run(ctx_in=bytes(8))

        def u(name: str) -> int:
            return int.from_bytes(coll.read_global(name), "little")

        config = kernel_config()
        assert u("version") == kernel_version() and u("version") >> 16 >= 5
        assert u("cookie") == 1
        assert u("hz") == int(config["CONFIG_HZ"])
        assert u("bpf_syscall") == 1
        assert u("jit") == {"y": 1, "m": 2}[config["CONFIG_BPF_JIT"]]
        assert u("missing") == 0
        local = config.get("CONFIG_LOCALVERSION", '""')[1:-1].encode()
        assert coll.read_global("localversion") == local[:15].ljust(16, b"\0")
        assert u("start_btf") == kallsyms()["__start_BTF"] != 0
        assert u("no_such_symbol") == 0


def _ldimm64_prog(name: str, ext: ExternVar) -> ProgramSpec:
    insns = [Insn(0x18, dst=1, src=Pseudo.BTF_ID, ref=name), Insn(0xB7), Insn(0x95)]
    return ProgramSpec("p", "syscall", ProgType.SYSCALL, insns, externs={name: ext})


def test_typed_ksym_resolves_to_its_vmlinux_btf_id() -> None:
    # loading needs the symbol's address, which this kernel's kallsyms (no CONFIG_KALLSYMS_ALL) may lack
    out = resolve_refs(_ldimm64_prog("bpf_prog_active", ExternVar("bpf_prog_active")), {})
    assert (out[0].src, out[0].imm, out[0].ref) == (Pseudo.BTF_ID, vmlinux_btf_id("bpf_prog_active", Kind.VAR), None)
    weak = resolve_refs(_ldimm64_prog("capsule_none", ExternVar("capsule_none", weak=True)), {})
    assert (weak[0].src, weak[0].imm) == (Pseudo.NONE, 0)
    with pytest.raises(LoadError, match="extern 'capsule_none' .__ksym., which is not in this kernel's BTF"):
        resolve_refs(_ldimm64_prog("capsule_none", ExternVar("capsule_none")), {})
    with pytest.raises(LoadError, match="no such kernel symbol"):
        resolve_refs(_ldimm64_prog("capsule_none", ExternVar("capsule_none", "kallsyms")), {})
    with pytest.raises(LoadError, match="no .kconfig map"):
        resolve_refs(_ldimm64_prog("CONFIG_HZ", ExternVar("CONFIG_HZ", "kconfig")), {})


@pytest.mark.parametrize(
    "var, value, want",
    [
        (KconfigVar("CONFIG_BPF_SYSCALL", 0, 1, "bool"), None, b"\x01"),
        (KconfigVar("CONFIG_BPF_SYSCALL", 0, 1, "char"), None, b"y"),
        (KconfigVar("CONFIG_BPF_SYSCALL", 0, 4, "tristate"), None, b"\x01\0\0\0"),
        (KconfigVar("CONFIG_HZ", 0, 8, "uint"), None, None),
        (KconfigVar("CONFIG_CAPSULE_MISSING", 0, 4, "tristate", weak=True), None, bytes(4)),
        (KconfigVar("LINUX_KERNEL_VERSION", 0, 4, "uint"), None, None),
    ],
)
def test_kconfig_values(var: KconfigVar, value: None, want: bytes | None) -> None:
    got = kconfig_value(var)
    if want is None:  # numbers: what the config says
        n = kernel_version() if var.name.startswith("LINUX_") else int(kernel_config()[var.name])
        want = n.to_bytes(var.size, "little")
    assert got == want


@pytest.mark.parametrize(
    "var, match",
    [
        (KconfigVar("CONFIG_CAPSULE_MISSING", 0, 4, "tristate"), "not set in the kernel's configuration"),
        (KconfigVar("LINUX_CAPSULE_UNKNOWN", 0, 4, "uint"), "not a value this loader knows"),
        (KconfigVar("CONFIG_HZ", 0, 1, "int"), "does not fit in 1 bytes"),  # 100 to 1000: above 127
        (KconfigVar("CONFIG_HZ", 0, 4, "char_array"), "not a string"),
        (KconfigVar("CONFIG_BPF_SYSCALL", 0, 4, "int"), "not a number"),
    ],
)
def test_kconfig_values_refused(var: KconfigVar, match: str) -> None:
    with pytest.raises(LoadError, match=match):
        kconfig_value(var)


def test_kernel_version_caps_the_patch_level() -> None:
    assert kernel_version("6.18.44-fc") == (6 << 16) + (18 << 8) + 44
    assert kernel_version("4.19.300") == (4 << 16) + (19 << 8) + 255
    assert kernel_version("7.0") == 7 << 16


@pytest.mark.requires_bpf
def test_ring_buffers_are_sized_like_libbpf() -> None:
    assert [_ringbuf_size(n) for n in (0, 1, 4096, 4097, 8192, 12288, 65536)] == [
        0, 4096, 4096, 8192, 8192, 16384, 65536]
    spec = ObjectSpec(maps={"rb": MapSpec("rb", MapType.RINGBUF, 0, 0, 2),
                            "urb": MapSpec("urb", MapType.USER_RINGBUF, 0, 0, 5000)})
    maps = create_maps(spec, None)
    try:
        assert (maps["rb"].info().max_entries, maps["urb"].info().max_entries) == (4096, 8192)
    finally:
        for m in maps.values():
            m.close()


SECTIONS = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("kprobe/do_nanosleep") int kp(void *ctx) { return 0; }
SEC("kretprobe") int krp(void *ctx) { return 0; }
SEC("uprobe.s") int ups(void *ctx) { return 0; }
SEC("kprobe.multi/do_*") int kpm(void *ctx) { return bpf_get_attach_cookie(ctx) != 0; }
SEC("uprobe.multi") int upm(void *ctx) { return 0; }
SEC("ksyscall/nanosleep") int ks(void *ctx) { return 0; }
SEC("usdt") int us(void *ctx) { return 0; }
SEC("tracepoint") int tp(void *ctx) { return 0; }
SEC("raw_tracepoint/filler/sys_x") int rtpf(void *ctx) { return 0; }
SEC("cgroup/connect4") int c4(struct bpf_sock_addr *ctx) { return 1; }
SEC("cgroup/sock") int cs(struct bpf_sock *ctx) { return 1; }
SEC("cgroup/skb") int cskb(struct __sk_buff *ctx) { return 1; }
SEC("cgroup/sysctl") int csys(struct bpf_sysctl *ctx) { return 1; }
SEC("cgroup/getsockopt") int cgso(struct bpf_sockopt *ctx) { return 1; }
SEC("cgroup/dev") int cdev(struct bpf_cgroup_dev_ctx *ctx) { return 1; }
SEC("sockops") int so(struct bpf_sock_ops *ctx) { return 1; }
SEC("sk_msg") int skm(struct sk_msg_md *ctx) { return SK_PASS; }
SEC("sk_skb/stream_verdict") int sks(struct __sk_buff *ctx) { return SK_PASS; }
SEC("sk_reuseport") int skr(struct sk_reuseport_md *ctx) { return SK_PASS; }
SEC("flow_dissector") int fd(struct __sk_buff *ctx) { return 0; }
SEC("lwt_in") int lwt(struct __sk_buff *ctx) { return 0; }
SEC("?tc") int later(struct __sk_buff *ctx) { return *(volatile int *)((char *)ctx + 4000); }
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.mark.requires_bpf
def test_libbpf_sections_load_and_question_marks_wait() -> None:
    spec = read_object(compile_bpf(SECTIONS))
    with Collection.load(spec) as coll:
        assert set(coll.programs) == set(spec.programs) - {"later"}
        for name, prog in coll.programs.items():
            assert prog.info().type == spec.programs[name].type != ProgType.UNSPEC
    with pytest.raises(VerifierError, match="invalid bpf_context access"):  # asked for by name, it is loaded
        Collection.load(spec, programs=["later"])


@pytest.mark.requires_bpf
def test_kprobe_session_needs_its_attach_type() -> None:
    src = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
extern _Bool bpf_session_is_return(void) __ksym;
SEC("kprobe.session") int sess(void *ctx) { return bpf_session_is_return(); }
char LICENSE[] SEC("license") = "GPL";
"""
    spec = read_object(compile_bpf(src))
    assert spec.programs["sess"].expected_attach_type == AttachType.TRACE_KPROBE_SESSION
    with Collection.load(spec) as coll:
        assert coll.programs["sess"].info().type == ProgType.KPROBE
    plain = replace(spec, programs={"sess": replace(spec.programs["sess"], expected_attach_type=0)})
    with pytest.raises(VerifierError, match="bpf_session_is_return"):
        Collection.load(plain)


@pytest.mark.requires_bpf
def test_naked_functions_btf_loads() -> None:
    src = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("socket") __attribute__((naked)) int naked_prog(void *ctx) { asm volatile ("r0 = 0; exit;"); }
char LICENSE[] SEC("license") = "GPL";
"""
    spec = read_object(compile_bpf(src))
    btf = spec.btf
    f = next(t for t in btf.iter_types() if isinstance(t, Func) and t.name == "naked_prog")
    proto = btf.type_by_id(f.type)
    assert isinstance(proto, FuncProto) and proto.params and not proto.params[0].name  # what clang leaves
    with Collection.load(spec) as coll:
        assert coll.btf_fd is not None and coll.programs["naked_prog"].info().btf_id
