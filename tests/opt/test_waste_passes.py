"""The passes for the waste the corpus showed after the paper's six (``scripts/opt_waste.py``): tailmerge, reuse,
copyprop. What each must rewrite, what it must leave alone, and a kernel-checked run of all three."""

from __future__ import annotations

import pytest

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
    alu,
    atomic,
    call_helper,
    exit_,
    jmp,
    ld_imm64,
    ld_map_fd,
    ld_map_value,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.disasm import disassemble
from capsule.bpf.opcodes import Alu, Atomic, Jmp
from capsule.bpf.spec import MapSpec, ObjectSpec, ProgramSpec
from capsule.kernel.consts import ProgType
from capsule.opt.check import Checker
from capsule.opt.passes.tailmerge import TailMerge
from capsule.opt.pipeline import make_passes, optimize_object
from capsule.opt.rewrite import Code

from .fixtures import prog, run_pass


# -- tailmerge ----------------------------------------------------------------------------------------------
def test_tailmerge_drops_the_copy_nothing_falls_into() -> None:
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R2, 5), mov(R0, 2), exit_(), mov(R0, 2), exit_(), labels={"b": 4})
    out, n = run_pass("tailmerge", ps)
    assert n == 1
    assert out == ["if r1 == 0x0 goto +0x1", "r2 = 0x5", "r0 = 0x2", "exit"]


def _tailmerge_with_goto(ps: ProgramSpec) -> tuple[list[str], int]:
    code, n = TailMerge(goto=True).run(Code.from_program(ps), ps.type)
    return disassemble(code.to_program(ps).insns), n


def test_tailmerge_a_run_entered_by_falling_through_starts_with_a_goto_only_when_asked() -> None:
    tail = (ld_map_value(R1, ".bss", 0), ldx(8, R2, R1, 0), alu(Alu.ADD, R2, 1), stx(8, R1, 0, R2), mov(R0, 2),
            exit_())
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R3, 1), *tail, mov(R3, 2), *tail, labels={"b": 8})
    assert run_pass("tailmerge", ps)[1] == 0  # by default: the goto would raise the verifier's work
    out, n = _tailmerge_with_goto(ps)
    assert n == 1
    # the second copy (entered from `r3 = 2`) is now a goto into the first
    assert out[:8] == ["if r1 == 0x0 goto +0x8", "r3 = 0x1", "ld_pseudo\tr1, 0x2, 0x0", "r2 = *(u64 *)(r1 + 0x0)",
                       "r2 += 0x1", "*(u64 *)(r1 + 0x0) = r2", "r0 = 0x2", "exit"]
    assert out[8:] == ["r3 = 0x2", "goto -0x9"]  # in slots: ld_imm64 is two


def test_tailmerge_follows_jumps_inside_the_runs_and_into_them() -> None:
    # two copies of "if r2 > 9 goto +1; r0 = 1; exit", the second also entered in its middle from the top
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), jmp(Jmp.JEQ, R1, 1, "mid"), mov(R2, 3),
              jmp(Jmp.JGT, R2, 9, "x1"), mov(R0, 1), exit_(),
              mov(R2, 4), jmp(Jmp.JGT, R2, 9, "x2"), mov(R0, 1), exit_(),
              labels={"b": 6, "x1": 5, "mid": 8, "x2": 9})
    assert run_pass("tailmerge", ps)[1] == 0
    out, n = _tailmerge_with_goto(ps)
    assert n == 1
    assert len(out) == 8 and out[-2:] == ["r2 = 0x4", "goto -0x5"]
    assert out[1] == "if r1 == 0x1 goto +0x2"  # was into the removed copy's `r0 = 1`, now into the kept one's


def test_tailmerge_leaves_runs_that_go_different_places() -> None:
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R0, 1), jmp(Jmp.JGT, R0, 9, "e1"), mov(R0, 2), exit_(),
              mov(R0, 1), jmp(Jmp.JGT, R0, 9, "e2"), mov(R0, 3), exit_(), labels={"b": 5, "e1": 4, "e2": 8})
    out, n = _tailmerge_with_goto(ps)
    # the runs differ just before their exits, and a lone exit entered by falling through is not worth a goto
    assert n == 0 and "r0 = 0x2" in out and "r0 = 0x3" in out


def test_tailmerge_does_not_add_a_goto_to_save_nothing() -> None:
    ps = prog(jmp(Jmp.JEQ, R1, 0, "b"), mov(R0, 1), exit_(), mov(R0, 2), exit_(), labels={"b": 3})
    assert _tailmerge_with_goto(ps)[1] == 0  # one instruction entered by falling through: a goto costs as much


# -- reuse --------------------------------------------------------------------------------------------------
def test_reuse_takes_a_map_from_the_register_that_holds_it() -> None:
    ps = prog(ld_map_fd(R6, "m"), st(4, R10, -4, 0), mov(R1, R6), mov(R2, R10), alu(Alu.ADD, R2, -4),
              call_helper(1), ld_map_fd(R1, "m"), mov(R2, R10), alu(Alu.ADD, R2, -4), call_helper(1),
              mov(R0, 0), exit_())
    out, n = run_pass("reuse", ps)
    assert n == 1
    assert out[6] == "r1 = r6"


def test_reuse_stack_address_from_a_callee_saved_register() -> None:
    ps = prog(mov(R7, R10), alu(Alu.ADD, R7, -8), st(8, R10, -8, 0), ld_map_fd(R1, "m"), mov(R2, R7),
              call_helper(1), ld_map_fd(R1, "n"), mov(R2, R10), alu(Alu.ADD, R2, -8), call_helper(1),
              mov(R7, R10), alu(Alu.ADD, R7, -8), mov(R0, 0), exit_())
    out, n = run_pass("reuse", ps)
    assert n == 2
    assert out.count("r2 = r7") == 2 and out.count("r7 = r10") == 1 and "r2 = r10" not in out


def test_reuse_needs_the_value_on_every_path() -> None:
    # r6 holds the map on one path only; a different map, a redefinition or a call all end what r6 holds
    ps = prog(jmp(Jmp.JEQ, R1, 0, "j"), ld_map_fd(R6, "m"), ld_map_fd(R1, "m"), mov(R0, 0), exit_(),
              labels={"j": 2})
    assert run_pass("reuse", ps)[1] == 0
    other = prog(ld_map_fd(R6, "m"), ld_map_fd(R1, "n"), mov(R0, 0), exit_())
    assert run_pass("reuse", other)[1] == 0
    moved = prog(ld_map_fd(R6, "m"), alu(Alu.ADD, R6, 0), ld_map_fd(R1, "m"), mov(R0, 0), exit_())
    assert run_pass("reuse", moved)[1] == 0
    clobbered = prog(ld_map_fd(R2, "m"), call_helper(5), ld_map_fd(R1, "m"), mov(R0, 0), exit_())
    assert run_pass("reuse", clobbered)[1] == 0
    offsets = prog(ld_map_value(R6, ".bss", 0), ld_map_value(R1, ".bss", 8), mov(R0, 0), exit_())
    assert run_pass("reuse", offsets)[1] == 0
    const = prog(ld_imm64(R6, 1 << 40), ld_imm64(R1, 1 << 40), mov(R0, 0), exit_())
    assert run_pass("reuse", const)[0][1] == "r1 = r6"


# -- copyprop -----------------------------------------------------------------------------------------------
def test_copyprop_readers_read_the_original() -> None:
    ps = prog(ldx(4, R5, R1, 0), mov(R8, R5), stx(4, R10, -4, R8), jmp(Jmp.JEQ, R8, 8, "a"), mov(R0, R5), exit_(),
              mov(R0, 0), exit_(), labels={"a": 6})
    out, n = run_pass("copyprop", ps)
    assert n == 1
    assert out[:4] == ["r5 = *(u32 *)(r1 + 0x0)", "*(u32 *)(r10 - 0x4) = r5", "if r5 == 0x8 goto +0x2", "r0 = r5"]
    # the original may change at the last reader: `r5 += r8` reads the old r5 twice
    ps = prog(ldx(4, R5, R1, 0), mov(R8, R5), alu(Alu.ADD, R5, R8), mov(R0, R5), exit_())
    assert run_pass("copyprop", ps)[0][1:3] == ["r5 += r5", "r0 = r5"]


def test_copyprop_frame_pointer_copies_only_into_memory_accesses() -> None:
    ps = prog(mov(R2, R10), stx(8, R2, -8, R1), ldx(8, R0, R2, -8), exit_(), ptype=ProgType.SYSCALL)
    out, _ = run_pass("copyprop", ps)
    assert out == ["*(u64 *)(r10 - 0x8) = r1", "r0 = *(u64 *)(r10 - 0x8)", "exit"]
    arith = prog(mov(R2, R10), mov(R3, 0), alu(Alu.ADD, R3, R2), mov(R0, 0), exit_())
    assert run_pass("copyprop", arith)[1] == 0


def test_copyprop_leaves_what_cannot_read_the_original() -> None:
    call_arg = prog(ldx(8, R6, R1, 0), mov(R1, R6), call_helper(16), mov(R0, R6), exit_())
    assert run_pass("copyprop", call_arg)[1] == 0
    written = prog(mov(R2, R1), alu(Alu.ADD, R2, 1), mov(R0, R2), exit_())
    assert run_pass("copyprop", written)[1] == 0
    source_changes = prog(mov(R2, R1), mov(R1, 0), mov(R0, R2), exit_())
    assert run_pass("copyprop", source_changes)[1] == 0
    live_out = prog(mov(R2, R1), jmp(Jmp.JEQ, R2, 0, "z"), mov(R0, R2), exit_(), mov(R0, 0), exit_(),
                    labels={"z": 4})
    assert run_pass("copyprop", live_out)[1] == 0
    atomics = prog(ld_map_value(R1, ".bss", 0), mov(R2, R1), mov(R3, 1), atomic(Atomic.ADD, 8, R2, 0, R3),
                   mov(R0, 0), exit_())
    assert run_pass("copyprop", atomics)[1] == 0


# -- in the kernel ------------------------------------------------------------------------------------------
def _waste_object() -> ObjectSpec:
    """An XDP program with each kind of waste: a copy, a map and a stack address built twice, a duplicated
    tail; its result depends on the packet, and it writes a map and global data, so the checker's runs tell."""
    tail = (ld_map_value(R1, ".bss", 0), ldx(8, R2, R1, 0), alu(Alu.ADD, R2, R5), stx(8, R1, 0, R2), mov(R0, 2),
            exit_())
    insns = (
        ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), mov(R4, R2), alu(Alu.ADD, R4, 14), jmp(Jmp.JGT, R4, R3, "short"),
        ldx(1, R5, R2, 12), alu(Alu.AND, R5, 3), mov(R8, R5), stx(4, R10, -4, R8),
        ld_map_fd(R6, "counts"), mov(R9, R10), alu(Alu.ADD, R9, -4), mov(R1, R6), mov(R2, R9), call_helper(1),
        jmp(Jmp.JEQ, R0, 0, "skip"), mov(R1, 1), atomic(Atomic.ADD, 8, R0, 0, R1),
        ld_map_fd(R1, "counts"), mov(R2, R10), alu(Alu.ADD, R2, -4), call_helper(1),  # "skip"
        mov(R7, 0), jmp(Jmp.JEQ, R0, 0, "nul"), ldx(8, R7, R0, 0),
        ldx(4, R5, R10, -4), alu(Alu.ADD, R5, R7), ld_map_value(R3, ".bss", 8), stx(8, R3, 0, R5),  # "nul"
        jmp(Jmp.JEQ, R5, 1, "one"), st(8, R10, -16, 7), *tail,
        *tail,  # "one"
        mov(R0, 1), exit_(),  # "short"
    )
    labels = {"skip": 18, "nul": 25, "one": 37, "short": 43}
    ps = prog(*insns, labels=labels)
    maps = {"counts": MapSpec("counts", 2, 4, 8, 4),
            ".bss": MapSpec(".bss", 2, 4, 16, 1, flags=1 << 10, contents=bytes(16), section=".bss")}
    return ObjectSpec(programs={"t": ps}, maps=maps, btf=None, license="GPL")


@pytest.mark.requires_bpf
def test_waste_passes_are_proven_in_the_kernel() -> None:
    spec = _waste_object()
    with Checker(spec) as checker:
        ref = checker.reference("t")
        assert "run" in ref.note  # XDP: run on generated packets, not only verified
        result = optimize_object(spec, make_passes(["reuse", "copyprop", "tailmerge"]), checker)
    r = result.programs["t"]
    assert not r.rolled_back(), [(x.name, x.reason) for x in r.rolled_back()]
    saved = r.saved_by_pass()
    assert saved.get("reuse", 0) >= 2 and saved.get("copyprop", 0) >= 1 and saved.get("tailmerge", 0) >= 6, saved
    assert r.ni_after <= r.ni_before - 9
