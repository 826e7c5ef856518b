"""What the optimizer's speed work relies on: no reference cycles (the pipeline runs with the cyclic collector
paused), a bounded memo of analyses, block-local def-use that outlives its analysis, and the fast paths of
superword merging and of the value analysis giving the results of the plain rules."""

from __future__ import annotations

import gc

from capsule.bpf.asm import R0, R1, R2, R3, R6, R10, alu, call, call_helper, exit_, jmp, ld_map_fd, ldx, mov, st, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel.consts import ProgType
from capsule.opt.analysis import Analysis
from capsule.opt.pipeline import make_passes, optimize_program
from capsule.opt.rewrite import Code
from capsule.opt.values import Kind

from .fixtures import prog, run_pass


def _programs() -> list:
    with_callee = prog(mov(R1, 1), call("f"), st(1, R10, -4, 0), st(1, R10, -3, 0), mov(R0, 0), exit_(),
                       mov(R0, R1), alu(Alu.ADD, R0, 0), exit_(), labels={"f": 6})
    loop = prog(mov(R6, 0), alu(Alu.ADD, R6, 1), mov(R2, 3), alu(Alu.ADD, R2, 1), jmp(Jmp.JLT, R6, 10, "top"),
                stx(8, R10, -8, R6), ldx(8, R0, R10, -8), exit_(), labels={"top": 1})
    spills = prog(ld_map_fd(R1, "m"), stx(8, R10, -16, R1), mov(R2, R10), alu(Alu.ADD, R2, -8), st(4, R10, -8, 0),
                  ldx(8, R1, R10, -16), call_helper(1), jmp(Jmp.JEQ, R0, 0, "out"), ldx(4, R3, R0, 0),
                  alu(Alu.LSH, R3, 32), alu(Alu.RSH, R3, 32), mov(R0, R3), exit_(), mov(R0, 0), exit_(),
                  labels={"out": 13})
    return [with_callee, loop, spills]


def test_optimizing_leaves_no_reference_cycles() -> None:
    progs = _programs()
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for ps in progs:
            optimize_program(ps, make_passes())
        found = gc.collect()
    finally:
        if was:
            gc.enable()
    assert found == 0  # everything the optimizer dropped was freed by reference counting


def test_optimizing_restores_the_collector_state() -> None:
    ps = _programs()[0]
    assert gc.isenabled()
    optimize_program(ps, make_passes())
    assert gc.isenabled()
    gc.disable()
    try:
        optimize_program(ps, make_passes())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_analysis_memo_is_shared_bounded_and_never_confuses_codes() -> None:
    ps = _programs()[1]
    code = Code.from_program(ps)
    a = Analysis.of(code, ps.type)
    assert Analysis.of(code, ps.type) is a
    assert Analysis.of(code, ProgType.SOCKET_FILTER) is not a  # another program type is another analysis
    others = [code.copy() for _ in range(8)]
    for c in others:
        assert Analysis.of(c, ps.type).code is c
    again = Analysis.of(code, ps.type)  # evicted by now: computed afresh, with the same results
    assert again.code is code and again.values.before == a.values.before
    Analysis.forget()
    assert Analysis.of(code, ps.type) is not again


def test_local_defs_work_after_their_analysis_is_gone() -> None:
    ps = _programs()[1]
    a = Analysis(Code.from_program(ps), ps.type)
    loc = a.local
    expected = [loc.uses_within(d, R2, frozenset()) for d in (2, 3)]
    loc2 = Analysis(Code.from_program(ps), ps.type).local  # its analysis is freed at once
    assert loc2.a is None
    assert [loc2.uses_within(d, R2, frozenset()) for d in (2, 3)] == expected == [False, True]


def test_superword_skips_windows_that_would_cut_a_store() -> None:
    # bytes -8..-5 = 01 02 03 04, written by a byte, a half starting mid-window and a byte
    ps = prog(st(1, R10, -8, 1), st(2, R10, -7, 0x0302), st(1, R10, -5, 4), mov(R0, 0), exit_())
    out, n = run_pass("superword", ps)
    assert n == 1 and out[0] == "*(u32 *)(r10 - 0x8) = 0x4030201" and len(out) == 3
    # a later byte store overwrites half of a half store: the two become one half store of the final bytes
    over = prog(st(2, R10, -8, 0xFFFF), st(1, R10, -7, 0x11), mov(R0, 0), exit_())
    assert run_pass("superword", over)[0][:2] == ["*(u16 *)(r10 - 0x8) = 0x11ff", "r0 = 0x0"]
    # the half store at -3 lies inside the window from -4 (merged); the byte at -6 has no partner (kept)
    cut = prog(st(1, R10, -4, 0), st(2, R10, -3, 0), st(1, R10, -1, 0), st(1, R10, -6, 0), mov(R0, 0), exit_())
    text, n = run_pass("superword", cut)
    assert n == 1 and text[0] == "*(u32 *)(r10 - 0x4) = 0x0"


def test_values_follow_spills_and_context_fields_through_offsets() -> None:
    ps = _programs()[2]
    a = Analysis(Code.from_program(ps), ps.type)
    assert a.values.reg(5, R1).kind == Kind.STACK or a.values.reg(6, R1).kind == Kind.MAP_PTR
    assert a.values.reg(6, R1).kind == Kind.MAP_PTR and a.values.reg(6, R1).ref == "m"  # reloaded spill
    assert a.values.reg(8, R0).kind == Kind.MAP_VALUE
    # XDP data / data_end through a context pointer moved by an offset
    xdp = prog(mov(R2, R1), alu(Alu.ADD, R2, 4), ldx(4, R3, R2, -4), ldx(4, R0, R2, 0), exit_(),
               ptype=ProgType.XDP)
    b = Analysis(Code.from_program(xdp), xdp.type)
    assert b.values.reg(3, R3).kind == Kind.PKT and b.values.reg(4, R0).kind == Kind.PKT_END
