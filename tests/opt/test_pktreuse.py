"""Packet pointer reuse (``pktreuse``): what it rewrites and what it must leave alone on bytecode fixtures, then
in the kernel: the rewritten program verifies, behaves like the original, and costs the verifier fewer
instructions once copy propagation has removed the copies."""

from __future__ import annotations

import pytest

from capsule.bpf.asm import R0, R1, R2, R3, R4, R5, R7, R8, R9, R10, alu, call_helper, exit_, jmp, ldx, mov, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import ObjectSpec
from capsule.kernel.consts import ProgType
from capsule.opt.check import Checker
from capsule.opt.pipeline import make_passes, optimize_object, optimize_program

from .fixtures import prog, run_pass, text

# r7 = ctx, r8 = data, r9 = data_end; 14 bytes proven
HEAD = (mov(R7, R1), ldx(4, R8, R7, 0), ldx(4, R9, R7, 4), mov(R2, R8), alu(Alu.ADD, R2, 14),
        jmp(Jmp.JGT, R2, R9, "out"))
OUT = (mov(R0, 1), exit_())


def _xdp(*body, ptype: int = ProgType.XDP):
    return prog(*HEAD, *body, mov(R0, 2), exit_(), *OUT, labels={"out": len(HEAD) + len(body) + 2}, ptype=ptype)


def _body(out: list[str]) -> list[str]:
    return out[len(HEAD):]


# -- pktreuse -------------------------------------------------------------------------------------------------
def test_data_end_reloaded_after_a_map_helper_becomes_a_copy() -> None:
    # get_smp_processor_id (8) leaves the packet alone: r9 still holds data_end
    ps = _xdp(call_helper(8), ldx(4, R3, R7, 4), mov(R2, R8), alu(Alu.ADD, R2, 34), jmp(Jmp.JGT, R2, R3, "out"))
    out, n = run_pass("pktreuse", ps)
    assert n == 1
    assert _body(out)[1] == "r3 = r9"


def test_data_reloaded_into_the_register_holding_it_goes() -> None:
    ps = _xdp(ldx(4, R8, R7, 0), ldx(1, R0, R8, 0), stx(8, R10, -8, R0))
    out, n = run_pass("pktreuse", ps)
    assert n == 1
    assert _body(out)[0] == "r0 = *(u8 *)(r8 + 0x0)"


def test_no_reuse_after_a_helper_that_may_move_the_packet_or_a_redefinition() -> None:
    adjust = _xdp(mov(R1, R7), mov(R2, 0), call_helper(44), ldx(4, R3, R7, 4))  # bpf_xdp_adjust_head
    assert run_pass("pktreuse", adjust)[1] == 0
    kfunc_like = _xdp(call_helper(12), ldx(4, R3, R7, 4))  # tail call: not known to keep the packet
    assert run_pass("pktreuse", kfunc_like)[1] == 0
    redefined = _xdp(alu(Alu.ADD, R9, 0), ldx(4, R3, R7, 4))
    assert run_pass("pktreuse", redefined)[1] == 0


def test_only_pointer_fields_and_only_when_every_path_holds_it() -> None:
    # ingress_ifindex (offset 12) is a scalar: a copy would link two scalars for the verifier
    scalar = _xdp(ldx(4, R4, R7, 12), ldx(4, R5, R7, 12), stx(8, R10, -8, R5), stx(8, R10, -16, R4))
    assert run_pass("pktreuse", scalar)[1] == 0
    # r9 no longer holds data_end; r3 holds it on one path into the join only
    one_path = prog(*HEAD, alu(Alu.ADD, R9, 0), jmp(Jmp.JEQ, R8, R2, "join"), ldx(4, R3, R7, 4),
                    ldx(4, R4, R7, 4), mov(R0, 2), exit_(), *OUT,
                    labels={"join": len(HEAD) + 3, "out": len(HEAD) + 6})
    assert run_pass("pktreuse", one_path)[1] == 0


def test_not_for_context_without_packet_pointers() -> None:
    ps = prog(ldx(4, R2, R1, 0), ldx(4, R3, R1, 0), mov(R0, R3), exit_(), ptype=ProgType.SYSCALL)
    assert run_pass("pktreuse", ps)[1] == 0


# -- in the kernel ----------------------------------------------------------------------------------------------
@pytest.mark.requires_bpf
def test_pktreuse_with_copyprop_is_proven_and_costs_the_verifier_less() -> None:
    body = (call_helper(8), stx(8, R10, -8, R0),
            ldx(4, R3, R7, 4), mov(R2, R8), alu(Alu.ADD, R2, 34), jmp(Jmp.JGT, R2, R3, "out"),
            ldx(1, R0, R8, 23), jmp(Jmp.JNE, R0, 6, "out"),
            ldx(4, R3, R7, 4), mov(R2, R8), alu(Alu.ADD, R2, 54), jmp(Jmp.JGT, R2, R3, "out"),
            ldx(1, R0, R8, 53), alu(Alu.AND, R0, 3), exit_())
    ps = prog(*HEAD, *body, *OUT, labels={"out": len(HEAD) + len(body)})
    spec = ObjectSpec(programs={"t": ps}, maps={}, btf=None, license="GPL")
    with Checker(spec) as checker:
        ref = checker.reference("t")
        assert "run" in ref.note
        result = optimize_object(spec, make_passes(["pktreuse", "copyprop"]), checker)
        r = result.programs["t"]
        assert not r.rolled_back(), [(x.name, x.reason) for x in r.rolled_back()]
        # both reloads of data_end became copies of r9, which copy propagation then removed
        assert not optimize_program(ps, make_passes(["copyprop"])).records  # nothing to do without pktreuse
        assert r.ni_after <= r.ni_before - 2
        assert [x for x in text(r.optimized) if "*(u32 *)" in x] == ["r8 = *(u32 *)(r1 + 0x0)",
                                                                     "r9 = *(u32 *)(r1 + 0x4)"]
        after = checker.stats_of("t", r.optimized)
        assert after.processed_insns < ref.stats.processed_insns
