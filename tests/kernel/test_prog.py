"""Loading and running programs of each type; info, xlated code, run-time stats."""

from __future__ import annotations

import struct

import pytest
from kprogs import ether, ipv4_udp, section_bytes

from capsule.bpf.asm import R0, R1, R2, R3, R4, R5, R6, Builder, alu, exit_, jmp, ld_abs, ldx, mov, stx
from capsule.bpf.insn import encode
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel import LogLevel, ProgFlags, Program, ProgType, XDPAction, bpf_stats
from tests.clang import CORPUS, compile_bpf

RET0 = [mov(R0, 0), exit_()]


def xdp_drop_ipv6() -> list:
    """XDP: drop frames whose EtherType is IPv6 (0x86dd), pass everything else (bounds-checked)."""
    b = Builder()
    b.emit(ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), mov(R4, R2), alu(Alu.ADD, R4, 14))
    b.emit(jmp(Jmp.JGT, R4, R3, "pass"))
    b.emit(ldx(2, R5, R2, 12))
    b.emit(jmp(Jmp.JEQ, R5, 0xDD86, "drop"))  # 0x86dd in network order, read little-endian
    b.label("pass")
    b.emit(mov(R0, int(XDPAction.PASS)), exit_())
    b.label("drop")
    b.emit(mov(R0, int(XDPAction.DROP)), exit_())
    return b.assemble()


@pytest.mark.requires_bpf
@pytest.mark.parametrize("ptype", [ProgType.XDP, ProgType.SYSCALL, ProgType.SOCKET_FILTER, ProgType.SCHED_CLS,
                                   ProgType.TRACEPOINT, ProgType.RAW_TRACEPOINT])
def test_each_type_loads(ptype):
    flags = ProgFlags.SLEEPABLE if ptype == ProgType.SYSCALL else 0
    with Program.load(ptype, RET0, name=f"t_{ptype.name.lower()}", prog_flags=flags) as p:
        info = p.info()
        assert info.type == ptype
        assert info.id > 0
        assert info.name == f"t_{ptype.name.lower()}"[:15]
        assert info.verified_insns == 2
    assert p.closed


@pytest.mark.requires_bpf
def test_xdp_pass_or_drop_by_packet_bytes():
    with Program.load(ProgType.XDP, xdp_drop_ipv6(), name="drop6") as p:
        assert p.test_run(ether(ethertype=0x86DD)).retval == XDPAction.DROP
        r = p.test_run(ether(b"hello", ethertype=0x0800))
        assert r.retval == XDPAction.PASS
        assert r.data_out == ether(b"hello", ethertype=0x0800)  # packet unchanged
        r = p.test_run(ether(ethertype=0x86DD), repeat=1000)
        assert r.retval == XDPAction.DROP and r.duration_ns >= 0


@pytest.mark.requires_bpf
def test_insns_as_bytes():
    with Program.load(ProgType.XDP, encode([mov(R0, 3), exit_()])) as p:
        assert p.test_run(ether()).retval == 3


@pytest.mark.requires_bpf
def test_socket_filter_ld_abs():
    # classic packet loads: return the IPv4 protocol byte. For SOCKET_FILTER test runs the kernel consumes
    # the Ethernet header (eth_type_trans), so offsets count from the network header.
    insns = [mov(R6, R1), ld_abs(1, 9), exit_()]
    with Program.load(ProgType.SOCKET_FILTER, insns, name="ld_abs") as p:
        assert p.test_run(ether(ipv4_udp(53))).retval == 17
        assert p.test_run(ether(ipv4_udp(53, proto=6))).retval == 6


@pytest.mark.requires_bpf
def test_socket_filter_compiled_from_c():
    obj = compile_bpf(CORPUS / "socket_ldabs.c")
    code = section_bytes(obj, "socket")

    def wrapped(frame: bytes) -> bytes:
        # the program parses an Ethernet frame at offset 0; the test run strips one Ethernet header first
        return ether(frame, ethertype=0x0800)[:14] + frame

    with Program.load(ProgType.SOCKET_FILTER, code, name="socket_ldabs") as p:
        small = ether(ipv4_udp(53))
        assert p.test_run(wrapped(small)).retval == len(small)  # accepted whole (60 < 96)
        big = ether(ipv4_udp(53, b"y" * 200))
        assert p.test_run(wrapped(big)).retval == 96  # truncated to 96 bytes
        assert p.test_run(wrapped(ether(ipv4_udp(8080)))).retval == 0  # high port: dropped
        assert p.test_run(wrapped(ether(ipv4_udp(53), ethertype=0x86DD))).retval == 0  # not IPv4


@pytest.mark.requires_bpf
def test_sched_cls_with_skb_context():
    # return skb->mark + skb->len
    insns = [ldx(4, R0, R1, 8), ldx(4, R2, R1, 0), alu(Alu.ADD, R0, R2), exit_()]
    skb = bytearray(192)  # struct __sk_buff
    struct.pack_into("<I", skb, 8, 1000)  # mark
    with Program.load(ProgType.SCHED_CLS, insns, name="cls_mark") as p:
        pkt = ether(b"abc")
        r = p.test_run(pkt, ctx_in=bytes(skb))
        assert r.retval == 1000 + len(pkt)
        assert r.ctx_out is not None and len(r.ctx_out) == 192
        assert struct.unpack_from("<I", r.ctx_out, 8)[0] == 1000  # the fields the kernel copies back


@pytest.mark.requires_bpf
def test_syscall_program_reads_and_writes_its_context():
    # ctx = {u32 a, u32 b, u64 sum}: sum = a + b, return a * b
    insns = [ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), mov(R4, R2), alu(Alu.ADD, R4, R3), stx(8, R1, 8, R4),
             mov(R0, R2), alu(Alu.MUL, R0, R3), exit_()]
    with Program.load(ProgType.SYSCALL, insns, name="sys_ctx", prog_flags=ProgFlags.SLEEPABLE) as p:
        r = p.test_run(ctx_in=struct.pack("<IIQ", 6, 7, 0))
        assert r.retval == 42
        assert r.ctx_out is not None and struct.unpack("<IIQ", r.ctx_out) == (6, 7, 13)
        with pytest.raises(ValueError):
            p.test_run(ctx_in=bytes(16), repeat=10)


@pytest.mark.requires_bpf
def test_retval_signed():
    with Program.load(ProgType.SYSCALL, [mov(R0, -5), exit_()], prog_flags=ProgFlags.SLEEPABLE) as p:
        r = p.test_run(ctx_in=bytes(8))
        assert r.retval == (1 << 32) - 5 and r.retval_signed == -5


@pytest.mark.requires_bpf
def test_info_and_xlated():
    insns = xdp_drop_ipv6()
    with Program.load(ProgType.XDP, insns, name="info_me", log_level=LogLevel.BRANCHES) as p:
        info = p.info()
        assert info.name == "info_me"
        assert info.xlated_prog_len == 8 * len(insns)
        assert info.jited_prog_len > 0
        assert info.verified_insns == p.stats.processed_insns
        assert len(info.tag) == 16 and info.gpl_compatible
        assert info.map_ids == []
        assert len(p.xlated()) == info.xlated_prog_len
        with Program.from_id(info.id) as again:
            assert again.info().tag == info.tag
            assert again.type == ProgType.XDP


@pytest.mark.requires_bpf
def test_bpf_stats_counts_runs():
    with Program.load(ProgType.XDP, xdp_drop_ipv6(), name="stats") as p:
        p.test_run(ether(), repeat=100)
        assert p.info().run_cnt == 0  # stats are off by default
        with bpf_stats():
            p.test_run(ether(), repeat=1000)
            info = p.info()
        assert info.run_cnt >= 1000
        assert info.run_time_ns > 0
        p.test_run(ether(), repeat=100)
        assert p.info().run_cnt == info.run_cnt  # off again after the with block


def test_bad_arguments():
    with pytest.raises(ValueError):
        Program.load(ProgType.XDP, b"")
    with pytest.raises(ValueError):
        Program.load(ProgType.XDP, b"\0" * 12)


@pytest.mark.requires_bpf
def test_non_gpl_program_cannot_use_gpl_helpers():
    from capsule.bpf.asm import call_helper
    from capsule.kernel import VerifierError
    from capsule.kernel.consts import Helper

    insns = [call_helper(int(Helper.KTIME_GET_NS)), mov(R0, 0), exit_()]
    with Program.load(ProgType.XDP, insns, license="GPL") as p:
        assert p.info().gpl_compatible
    with pytest.raises(VerifierError) as ei:
        trace_printk = 6
        Program.load(ProgType.XDP, [call_helper(trace_printk), mov(R0, 0), exit_()], license="Proprietary")
    assert "GPL" in ei.value.reason or "gpl" in ei.value.log


@pytest.mark.requires_bpf
@pytest.mark.parametrize("cond", [(Jmp.JEQ, 7), (Jmp.JSET, 4)])
def test_far_conditional_jumps_run_in_the_kernel(cond):
    """The long forms of a conditional jump beyond 16 bits (``asm.resolve``) verify and go where they should,
    taken and not taken, through 40,000 instructions of the not-taken path."""
    op, imm = cond
    b = Builder()
    b.emit(ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), mov(R4, R2), alu(Alu.ADD, R4, 1))
    b.emit(jmp(Jmp.JGT, R4, R3, "short"), ldx(1, R5, R2, 0), mov(R0, 0))
    b.emit(jmp(op, R5, imm, "far"))
    for _ in range(40000):
        b.emit(alu(Alu.ADD, R0, 1))
    b.emit(mov(R0, int(XDPAction.PASS)), exit_())
    b.label("far")
    b.emit(mov(R0, int(XDPAction.DROP)), exit_())
    b.label("short")
    b.emit(mov(R0, int(XDPAction.ABORTED)), exit_())
    insns = b.assemble()
    assert any(i.is_gotol for i in insns)
    with Program.load(ProgType.XDP, insns, name="far") as p:
        taken = bytes([7 if op == Jmp.JEQ else 4]) + bytes(13)
        assert p.test_run(taken).retval == XDPAction.DROP
        assert p.test_run(bytes([2]) + bytes(13)).retval == XDPAction.PASS
