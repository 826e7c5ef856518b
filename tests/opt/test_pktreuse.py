"""Packet pointer reuse (``pktreuse``) in the kernel: with copy propagation, the rewritten program verifies,
behaves like the original and costs the verifier fewer instructions (what it rewrites and leaves alone is in
``filetests/pktreuse/``)."""

from __future__ import annotations

import pytest

from capsule.bpf.asm import R0, R1, R2, R3, R7, R8, R9, R10, alu, call_helper, exit_, jmp, ldx, mov, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import ObjectSpec
from capsule.opt.check import Checker
from capsule.opt.pipeline import make_passes, optimize_object, optimize_program

from .fixtures import prog, text

# r7 = ctx, r8 = data, r9 = data_end; 14 bytes proven
HEAD = (mov(R7, R1), ldx(4, R8, R7, 0), ldx(4, R9, R7, 4), mov(R2, R8), alu(Alu.ADD, R2, 14),
        jmp(Jmp.JGT, R2, R9, "out"))
OUT = (mov(R0, 1), exit_())


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
