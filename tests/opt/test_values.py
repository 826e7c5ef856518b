"""The value analysis (``capsule.opt.values``): what registers and stack slots hold through helper calls,
spills and context offsets, and the same results from an edited version as from a fresh start."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R7,
    R10,
    alu,
    call_helper,
    exit_,
    jmp,
    ld_map_value,
    ldx,
    mov,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.uapi import ProgType
from capsule.opt import values
from capsule.opt.analysis import Analysis
from capsule.opt.rewrite import Code
from capsule.opt.values import Kind, analyze_values

from .fixtures import SYS, prog, sample_programs, two_functions


def _fresh(code: Code, prog_type: int) -> list:
    values.forget()
    return analyze_values(Analysis(code, prog_type).cfg, prog_type).before


def _analysed(code: Code, prog_type: int) -> list:
    return analyze_values(Analysis(code, prog_type).cfg, prog_type).before


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


def test_values_follow_spills_and_context_fields_through_offsets() -> None:
    ps = sample_programs()[2]
    a = Analysis(Code.from_program(ps), ps.type)
    assert a.values.reg(5, R1).kind == Kind.STACK or a.values.reg(6, R1).kind == Kind.MAP_PTR
    assert a.values.reg(6, R1).kind == Kind.MAP_PTR and a.values.reg(6, R1).ref == "m"  # reloaded spill
    assert a.values.reg(8, R0).kind == Kind.MAP_VALUE
    # XDP data / data_end through a context pointer moved by an offset
    xdp = prog(mov(R2, R1), alu(Alu.ADD, R2, 4), ldx(4, R3, R2, -4), ldx(4, R0, R2, 0), exit_(),
               ptype=ProgType.XDP)
    b = Analysis(Code.from_program(xdp), xdp.type)
    assert b.values.reg(3, R3).kind == Kind.PKT and b.values.reg(4, R0).kind == Kind.PKT_END


def test_edited_versions_get_the_states_of_a_fresh_analysis() -> None:
    ps = two_functions()
    code = Code.from_program(ps)
    assert _analysed(code, ps.type) == _fresh(code, ps.type)
    first = _analysed(code, ps.type)
    # an edit inside f only: main is not analysed again (its states are the very same objects)
    in_f = code.edit(replace_with={11: mov(R3, 6)})
    got = _analysed(in_f, ps.type)
    assert all(got[i] is first[i] for i in range(9))
    assert got == _fresh(in_f, ps.type)
    assert got[13].regs[R3].tn.value == 6  # the reloaded spill holds the new constant
    # an edit in main's loop: f's states are reused, main's blocks after the edit see the new values
    first = _analysed(code, ps.type)
    in_main = code.edit(delete={5})
    got = _analysed(in_main, ps.type)
    assert got == _fresh(in_main, ps.type)
    assert all(got[i] is first[i + 1] for i in range(8, 14))


def test_blocks_are_reused_only_with_the_same_entry_state_and_program_type() -> None:
    # the edit makes r2 2 instead of 1 in the fall-through block; the other blocks stay as they were
    ps = prog(jmp(Jmp.JEQ, R1, 0, "out"), mov(R2, 1), alu(Alu.ADD, R2, 1), mov(R0, R2), exit_(), mov(R0, 0),
              exit_(), labels={"out": 5})
    code = Code.from_program(ps)
    before = _analysed(code, ps.type)
    changed = code.edit(replace_with={1: mov(R2, 2)})
    after = _analysed(changed, ps.type)
    assert after == _fresh(changed, ps.type)
    assert after[3].regs[R2].tn.value == 3 and before[3].regs[R2].tn.value == 2
    assert after[0] is before[0] and after[5] is before[5] and after[6] is before[6]  # reused
    # a block whose entry state changed is run again even though its instructions did not
    ps2 = prog(mov(R2, 1), jmp(Jmp.JEQ, R1, 0, "out"), mov(R0, 1), exit_(), mov(R0, R2), exit_(), labels={"out": 4})
    c1 = Code.from_program(ps2)
    _analysed(c1, ps2.type)
    c2 = c1.edit(replace_with={0: mov(R2, 7)})
    got = _analysed(c2, ps2.type)
    assert got == _fresh(c2, ps2.type) and got[5].regs[R0].tn.value == 7
    # the same code under another program type reads the context differently: nothing is reused
    ctx = prog(ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), mov(R0, 0), exit_())
    c2 = Code.from_program(ctx)
    xdp = _analysed(c2, ProgType.XDP)
    sock = _analysed(c2, ProgType.SOCKET_FILTER)
    assert sock == _fresh(c2, ProgType.SOCKET_FILTER) and sock != xdp
    values.forget()
