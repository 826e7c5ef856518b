"""The rewrites and analysis refinements added for speed and effectiveness, each on bytecode fixtures:
what must be rewritten, and the neighbouring cases that must be left alone."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R6,
    R7,
    R10,
    alu,
    call_helper,
    exit_,
    jmp,
    ld_map_fd,
    ld_map_value,
    ldx,
    mov,
    movsx,
    st,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel.consts import ProgType
from capsule.opt.analysis import Analysis
from capsule.opt.check import NPI_REFUSED
from capsule.opt.pipeline import make_passes, optimize_program
from capsule.opt.rewrite import Code
from capsule.opt.values import Kind

from .fixtures import prog, run_pass

SYS = ProgType.SYSCALL


# -- peephole: jset, jmp32, mirrored comparisons -----------------------------------------------------------
def test_and_then_jne_zero_becomes_jset() -> None:
    ps = prog(ldx(4, R1, R1, 0), alu(Alu.AND, R1, 4), jmp(Jmp.JNE, R1, 0, "t"), mov(R0, 0), exit_(),
              mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if r1 & 0x4 goto +0x2"
    # the masked value is still needed after the jump: left alone
    used = prog(ldx(4, R1, R1, 0), alu(Alu.AND, R1, 4), jmp(Jmp.JNE, R1, 0, "t"), mov(R0, 0), exit_(),
                mov(R0, R1), exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", used)[1] == 0
    # == 0 has no single-instruction form
    eq = prog(ldx(4, R1, R1, 0), alu(Alu.AND, R1, 4), jmp(Jmp.JEQ, R1, 0, "t"), mov(R0, 0), exit_(),
              mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", eq)[1] == 0


def test_copy_and_mask_then_jne_zero_tests_the_source() -> None:
    ps = prog(ldx(4, R3, R1, 0), mov(R2, R3), alu(Alu.AND, R2, 2, w32=True), jmp(Jmp.JNE, R2, 0, "t"),
              mov(R0, R3), exit_(), mov(R0, 1), exit_(), labels={"t": 6}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if w3 & 0x2 goto +0x2"  # the 32-bit mask makes the test 32-bit


def test_zero_extension_compared_in_64_bits_becomes_jmp32() -> None:
    ps = prog(ldx(8, R2, R1, 0), mov(R1, R2, w32=True), jmp(Jmp.JSGT, R1, 0x80, "t"), mov(R0, R2), exit_(),
              mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if w2 > 0x80 goto +0x2"  # signed becomes unsigned on [0, 2**31)
    negative = prog(ldx(8, R2, R1, 0), mov(R1, R2, w32=True), jmp(Jmp.JGT, R1, -1, "t"), mov(R0, R2), exit_(),
                    mov(R0, 1), exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", negative)[1] == 0  # the 64-bit -1 is no 32-bit constant


def test_constant_on_the_left_is_mirrored() -> None:
    ps = prog(ldx(4, R1, R1, 0), mov(R2, 2), jmp(Jmp.JSGT, R2, R1, "t"), mov(R0, 0), exit_(), mov(R0, 1),
              exit_(), labels={"t": 5}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n == 1 and out[1] == "if r1 s< 0x2 goto +0x2"
    live = prog(ldx(4, R1, R1, 0), mov(R2, 2), jmp(Jmp.JSGT, R2, R1, "t"), mov(R0, R2), exit_(), mov(R0, 1),
                exit_(), labels={"t": 5}, ptype=SYS)
    assert run_pass("peephole", live)[1] == 0


# -- compact: sign-extending loads --------------------------------------------------------------------------
def test_load_then_sign_extension_becomes_ldsx_on_map_values_only() -> None:
    ps = prog(ld_map_value(R1, ".bss", 0), ldx(4, R2, R1, 4), movsx(R2, R2, 32), mov(R0, R2), exit_())
    out, n = run_pass("compact", ps)
    assert n == 1 and out[1] == "r2 = *(s32 *)(r1 + 0x4)"
    shifts = prog(ld_map_value(R1, ".bss", 0), ldx(2, R2, R1, 4), alu(Alu.LSH, R2, 48), alu(Alu.ARSH, R2, 48),
                  mov(R0, R2), exit_())
    out, _ = run_pass("compact", shifts)
    assert out[1:3] == ["r2 = *(s16 *)(r1 + 0x4)", "r0 = r2"]
    ctx = prog(ldx(4, R2, R1, 4), movsx(R2, R2, 32), mov(R0, R2), exit_(), ptype=ProgType.SCHED_CLS)
    out, _ = run_pass("compact", ctx)
    assert out[0] == "r2 = *(u32 *)(r1 + 0x4)"  # the context's fields are rewritten by the kernel
    wrong_width = prog(ld_map_value(R1, ".bss", 0), ldx(4, R2, R1, 4), movsx(R2, R2, 16), mov(R0, R2), exit_())
    assert run_pass("compact", wrong_width)[0][1] == "r2 = *(u32 *)(r1 + 0x4)"


# -- constprop: redundant constants, dead chains, dead stores in escaping frames ---------------------------
def test_mov_of_the_constant_already_held_goes() -> None:
    ps = prog(mov(R1, 5), stx(8, R10, -8, R1), mov(R1, 5), stx(8, R10, -16, R1), ldx(8, R0, R10, -8),
              ldx(8, R2, R10, -16), alu(Alu.ADD, R0, R2), exit_(), ptype=SYS)
    code, _ = make_passes(["constprop"])[0].run(Code.from_program(ps), ps.type)
    assert sum(1 for i in code.insns if i.code == 0xB7 and i.imm == 5) <= 1


def test_dead_chains_go_in_one_round() -> None:
    ps = prog(ldx(4, R2, R1, 0), mov(R3, R2), alu(Alu.ADD, R3, 1), alu(Alu.LSH, R3, 2), mov(R0, 0), exit_(),
              ptype=SYS)
    a = Analysis(Code.from_program(ps), ps.type)
    assert a.faint == {0, 1, 2, 3}
    out, _ = run_pass("constprop", ps)
    assert out == ["r0 = 0x0", "exit"]


def test_dead_stack_store_found_even_when_the_frame_escapes() -> None:
    # the frame escapes (r2 = fp-8 goes to a helper), but fp-24 is written twice and read once
    ps = prog(ldx(8, R3, R1, 0), st(8, R10, -8, 0), st(8, R10, -24, 1), stx(8, R10, -24, R3), ldx(8, R6, R10, -24),
              ld_map_fd(R1, "m"), mov(R2, R10), alu(Alu.ADD, R2, -8), call_helper(1), mov(R0, R6), exit_(),
              ptype=SYS)
    out, _ = run_pass("constprop", ps)
    assert "*(u64 *)(r10 - 0x18) = 0x1" not in out
    assert "*(u64 *)(r10 - 0x18) = r3" in out and "*(u64 *)(r10 - 0x8) = 0x0" in out
    # a helper reads upwards from its pointer argument: fp-24 is above fp-32, so both stores stay live
    above = prog(st(8, R10, -24, 1), mov(R2, R10), alu(Alu.ADD, R2, -32), ld_map_fd(R1, "m"), call_helper(1),
                 mov(R0, 0), exit_(), ptype=SYS)
    assert run_pass("constprop", above)[0][0] == "*(u64 *)(r10 - 0x18) = 0x1"


# -- superword: whole runs in one round ---------------------------------------------------------------------
def test_superword_merges_a_run_of_bytes_into_one_store_in_one_round() -> None:
    ps = prog(*(st(1, R10, -8 + k, 0) for k in range(8)), mov(R0, 0), exit_(), ptype=SYS)
    code, n = make_passes(["superword"])[0].run(Code.from_program(ps), ps.type)
    from capsule.bpf.disasm import disassemble

    assert disassemble(code.insns)[0] == "*(u64 *)(r10 - 0x8) = 0x0" and len(code.insns) == 3


def test_superword_keeps_later_values_and_leaves_partial_overlaps() -> None:
    ps = prog(st(2, R10, -8, 0x1111), st(1, R10, -8, 0x22), st(1, R10, -7, 0x33), mov(R0, 0), exit_(), ptype=SYS)
    out, _ = run_pass("superword", ps)
    assert out[0] == "*(u16 *)(r10 - 0x8) = 0x3322"
    overlap = prog(st(4, R10, -8, 1), st(1, R10, -6, 2), st(1, R10, -4, 3), mov(R0, 0), exit_(), ptype=SYS)
    out, _ = run_pass("superword", overlap)
    assert out[:2] == ["*(u32 *)(r10 - 0x8) = 0x20001", "*(u8 *)(r10 - 0x4) = 0x3"]
    straddle = prog(st(1, R10, -8, 1), st(1, R10, -7, 2), st(1, R10, -6, 3), st(2, R10, -5, 4), mov(R0, 0),
                    exit_(), ptype=SYS)
    out, _ = run_pass("superword", straddle)
    # the 2-byte store crosses the 4-byte window, so only the first two bytes merge
    assert out[:3] == ["*(u16 *)(r10 - 0x8) = 0x201", "*(u8 *)(r10 - 0x6) = 0x3", "*(u16 *)(r10 - 0x5) = 0x4"]


# -- value analysis ----------------------------------------------------------------------------------------
def test_spills_survive_helper_calls_that_cannot_reach_them() -> None:
    def spill_after(ptr_off: int, size: int | None, slot: int, helper: int = 113) -> Kind:
        body = [ld_map_value(R7, ".bss", 0), stx(8, R10, slot, R7), mov(R1, R10), alu(Alu.ADD, R1, ptr_off)]
        body += [mov(R2, size) if size is not None else ldx(4, R2, R7, 0), mov(R3, 0), call_helper(helper),
                 ldx(8, R3, R10, slot), mov(R0, 0), exit_()]
        ps = prog(*body)
        return Analysis(Code.from_program(ps), ps.type).values.reg(len(body) - 2, 3).kind

    # probe_read_kernel(dst=fp-16, 8, src) writes exactly fp-16..fp-9
    assert spill_after(-16, 8, -24) == Kind.MAP_VALUE
    assert spill_after(-16, 8, -8) == Kind.MAP_VALUE
    assert spill_after(-16, 8, -16) == Kind.NONSTACK  # data now: the verifier reads it back as a scalar
    # an unknown size: anything above the pointer may change
    assert spill_after(-16, None, -8) == Kind.TOP
    assert spill_after(-16, None, -24) == Kind.MAP_VALUE
    # map_lookup_elem only reads its key; a helper not in the table is not trusted with a stack pointer
    assert spill_after(-8, 8, -8, helper=1) == Kind.MAP_VALUE
    assert spill_after(-16, 8, -24, helper=200) == Kind.TOP


def test_unknown_values_that_cannot_be_stack_pointers() -> None:
    ps = prog(ldx(8, R2, R1, 0), ldx(8, R3, R10, -8), mov(R0, 0), exit_(), ptype=SYS)
    a = Analysis(Code.from_program(ps), ps.type)
    assert a.values.reg(2, 2).kind == Kind.NONSTACK  # loaded from the context: never a usable stack pointer
    assert a.values.reg(3, 3).kind == Kind.TOP  # an unfollowed stack slot may hold one


def test_analysis_is_shared_by_passes_on_unchanged_code() -> None:
    code = Code.from_program(prog(mov(R0, 0), exit_()))
    assert Analysis.of(code, 6) is Analysis.of(code, 6)
    assert Analysis.of(code.copy(), 6) is not Analysis.of(code, 6)


# -- pipeline: NPI refusals are not failures --------------------------------------------------------------
def test_npi_refusals_are_recorded_apart_from_failures() -> None:
    ps = prog(mov(R1, 5), alu(Alu.ADD, R1, 3), mov(R0, R1), exit_(), ptype=SYS)

    def check(name: str, candidate) -> str | None:
        return f"{NPI_REFUSED}: 3 -> 4"

    r = optimize_program(ps, make_passes(), check)
    assert r.records and not r.failed() and r.npi_refused() == r.rolled_back()
    assert r.optimized is ps


# -- peephole: jump threading -------------------------------------------------------------------------------
def test_jumps_to_a_goto_go_straight_to_its_target_and_the_orphan_goes() -> None:
    from capsule.bpf.asm import ja

    # 0: if r1 == 0 goto 4 (a goto back to 3); the goto is reached by nothing else: it goes too
    ps = prog(ldx(4, R1, R1, 0), jmp(Jmp.JEQ, R1, 0, "g"), mov(R0, 1), exit_(), mov(R0, 0), exit_(), ja("back"),
              labels={"g": 6, "back": 4}, ptype=SYS)
    out, n = run_pass("peephole", ps)
    assert n >= 1 and out == ["r1 = *(u32 *)(r1 + 0x0)", "if r1 == 0x0 goto +0x2", "r0 = 0x1", "exit", "r0 = 0x0",
                              "exit"]
    # a goto also reached by falling into it stays (the verifier refuses unreachable code, not this)
    kept = prog(ldx(4, R1, R1, 0), jmp(Jmp.JEQ, R1, 0, "g"), mov(R0, 1), ja("out"), mov(R0, 0), exit_(),
                labels={"g": 3, "out": 5}, ptype=SYS)
    out, _ = run_pass("peephole", kept)
    assert out[1] == "if r1 == 0x0 goto +0x3" and out[3] == "goto +0x1"


def test_fusion_leaves_spilled_pointers_alone() -> None:
    # fp-8 holds a spilled map value pointer: "+= 4" on it must stay a plain load/add/store, or the verifier
    # forgets the pointer
    body = (ld_map_value(R1, ".bss", 0), stx(8, R10, -8, R1), ldx(8, R1, R10, -8), alu(Alu.ADD, R1, 4),
            stx(8, R10, -8, R1), ldx(8, R2, R10, -8), ldx(4, R0, R2, 0), exit_())
    assert run_pass("fusion", prog(*body))[1] == 0
    # the same on a slot holding a number is fused
    num = (st(8, R10, -8, 0), ldx(8, R1, R10, -8), alu(Alu.ADD, R1, 4), stx(8, R10, -8, R1), ldx(8, R0, R10, -8),
           exit_())
    out, n = run_pass("fusion", prog(*num, ptype=SYS))
    assert n == 1 and "lock *(u64 *)(r10 - 0x8) += r1" in out
