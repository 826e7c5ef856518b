"""BTF into the kernel (BPF_BTF_LOAD, func_info) and kfunc ids from vmlinux BTF."""

from __future__ import annotations

import errno
import struct

import pytest
from elftools.elf.elffile import ELFFile
from kprogs import section_bytes

from capsule.bpf.btf import BTF
from capsule.bpf.btf_types import Kind
from capsule.bpf.spec import FuncInfo
from capsule.kernel import BTFLoadError, Program, ProgType, VerifierError, load_btf, vmlinux_btf_id
from capsule.kernel.btf import btf_fd_by_id, btf_info, vmlinux_btf
from tests.clang import CORPUS, compile_bpf


def tiny_btf(bits: int = 32) -> bytes:
    """BTF with one type: INT "int" (signed, 4 bytes, ``bits`` bits used)."""
    strings = b"\0int\0"
    types = struct.pack("<III", 1, 1 << 24, 4) + struct.pack("<I", (1 << 24) | bits)
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + types + strings


def elf_section(path, name: str) -> bytes:
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(name).data()


@pytest.mark.requires_bpf
def test_load_tiny_btf():
    with load_btf(tiny_btf()) as fd:
        info = btf_info(fd)
        assert info.id > 0 and info.btf_size == len(tiny_btf())
        with btf_fd_by_id(info.id) as again:
            assert btf_info(again).id == info.id


@pytest.mark.requires_bpf
def test_bad_btf_explains_itself():
    with pytest.raises(BTFLoadError) as ei:
        load_btf(tiny_btf(bits=64))  # 64 bits do not fit a 4-byte int
    e = ei.value
    assert e.errno == errno.EINVAL
    assert e.log  # the load was repeated with a log
    assert "nr_bits exceeds type_size" in e.log
    assert "BTF_LOAD" in str(e) and "BTF log" in str(e)
    with pytest.raises(BTFLoadError):
        load_btf(b"\0" * 24)


# no globals (not even a license string), so clang's .BTF has no DATASEC to fix up and loads as it is
KEEP_LEN = """
#include <linux/bpf.h>
__attribute__((section("socket"), used)) int keep_len(struct __sk_buff *skb) { return skb->len; }
"""


@pytest.mark.requires_bpf
def test_program_with_btf_and_func_info():
    obj = compile_bpf(KEEP_LEN)
    blob = elf_section(obj, ".BTF")
    func_id = BTF.parse(blob).find_id("keep_len")
    assert func_id
    with load_btf(blob) as btf:
        prog = Program.load(ProgType.SOCKET_FILTER, section_bytes(obj, "socket"), name="keep_len",
                            prog_btf_fd=btf, func_info=[FuncInfo(0, func_id)])
        with prog:
            info = prog.info()
            assert info.btf_id == btf_info(btf).id
            assert prog.test_run(bytes(64)).retval == 64 - 14  # socket filters see the packet after L2
        with pytest.raises(VerifierError) as ei:  # a func_info pointing at a non-FUNC type is refused
            Program.load(ProgType.SOCKET_FILTER, section_bytes(obj, "socket"), prog_btf_fd=btf,
                         func_info=[FuncInfo(0, 1)])
        assert ei.value.errno == errno.EINVAL and "func" in ei.value.reason.lower()


@pytest.mark.requires_bpf
def test_clang_btf_with_unfixed_datasec_is_refused_with_reason():
    blob = elf_section(compile_bpf(CORPUS / "socket_ldabs.c"), ".BTF")  # DATASEC "license" of size 0
    with pytest.raises(BTFLoadError) as ei:
        load_btf(blob)
    assert "DATASEC license" in ei.value.log


def test_vmlinux_lookup():
    kfunc = vmlinux_btf_id("bpf_arena_alloc_pages")
    assert kfunc > 0
    assert vmlinux_btf_id("bpf_arena_alloc_pages") == kfunc  # cached
    assert vmlinux_btf_id("task_struct", Kind.STRUCT) > 0
    with pytest.raises(KeyError):
        vmlinux_btf_id("no_such_kfunc_in_any_kernel")
    assert len(vmlinux_btf()) > 10_000 and vmlinux_btf() is vmlinux_btf()
