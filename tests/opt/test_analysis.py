"""CFG, liveness, reaching definitions and the value analysis on small fixtures."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R6,
    R10,
    alu,
    call,
    call_helper,
    exit_,
    jmp,
    ld_map_fd,
    ld_map_value,
    ldx,
    mov,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel.consts import ProgType
from capsule.opt.analysis import Analysis
from capsule.opt.reaching import ENTRY
from capsule.opt.rewrite import Code
from capsule.opt.semantics import alu_result
from capsule.opt.tnum import Tnum
from capsule.opt.values import Kind

from .fixtures import prog, sample_programs


def _an(ps) -> Analysis:
    return Analysis(Code.from_program(ps), ps.type)


def test_blocks_successors_and_subprograms() -> None:
    ps = prog(
        mov(R0, 0), jmp(Jmp.JEQ, R1, 0, "out"), mov(R0, 1), call("sub"),
        exit_(), mov(R0, 2), exit_(),
        labels={"out": 4, "sub": 5},
    )
    a = _an(ps)
    assert sorted(a.cfg.functions) == [0, 5]
    main = a.cfg.functions[0]
    assert sorted(main.blocks) == [0, 2, 4]
    assert main.blocks[0].succs == [2, 4] and main.calls == [5]
    assert a.cfg.func_of[6] == 5


def test_liveness_and_def_use() -> None:
    ps = prog(mov(R2, 1), mov(R3, 2), alu(Alu.ADD, R2, R3), mov(R3, 9), mov(R0, R2), exit_())
    a = _an(ps)
    assert a.live.dead_after(3, 3)  # r3 = 9 is never read
    assert not a.live.dead_after(1, 3)
    assert a.du.uses_of[1] == {2}
    assert a.du.defs_at(4, 2) == frozenset({2})
    assert a.du.defs_at(0, 1) == frozenset({ENTRY})


def test_helper_calls_clobber_and_read_their_arguments() -> None:
    ps = prog(mov(R6, R1), ld_map_fd(R1, "m"), mov(R2, R10), alu(Alu.ADD, R2, -4), mov(R3, 5),
              call_helper(1), mov(R0, 0), exit_())
    a = _an(ps)
    assert a.live.dead_after(4, 3)  # map_lookup_elem takes two arguments
    v = a.values.reg(6, 0)
    assert v.kind == Kind.MAP_VALUE and v.ref == "m" and v.const_offset == 0
    assert a.values.reg(6, 1).kind == Kind.NONSTACK  # clobbered (never a stack pointer)


def test_pointer_kinds_offsets_and_known_bits() -> None:
    ps = prog(
        ldx(4, R2, R1, 0), ldx(4, R3, R1, 4), alu(Alu.ADD, R2, 14),
        ldx(1, R0, R2, 0), alu(Alu.LSH, R0, 8), ld_map_value(R3, ".bss", 8), mov(R0, 0), exit_(),
    )
    a = _an(ps)
    assert a.values.reg(2, 3).kind == Kind.PKT_END
    p = a.values.reg(3, 2)
    assert p.kind == Kind.PKT and p.const_offset == 14
    b = a.values.reg(5, 0)
    assert b.kind == Kind.SCALAR and b.tn == Tnum(0, 0xFF00)
    assert a.values.reg(6, 3).const_offset == 8 and a.values.reg(6, 3).ref == ".bss"


def test_stack_spills_are_followed_and_constants_folded() -> None:
    ps = prog(mov(R2, 40), alu(Alu.ADD, R2, 2), stx(8, R10, -8, R2), ldx(8, R3, R10, -8), mov(R0, R3), exit_(),
              ptype=ProgType.SYSCALL)
    a = _an(ps)
    assert a.values.reg(4, 3).is_const and a.values.reg(4, 3).tn.value == 42


def test_loops_converge() -> None:
    ps = prog(mov(R0, 0), alu(Alu.ADD, R0, 1), jmp(Jmp.JLT, R0, 100, -2), exit_())
    a = _an(ps)
    v = a.values.reg(1, 0)
    assert v.kind == Kind.SCALAR and not v.is_const


def test_exact_alu_semantics() -> None:
    from capsule.bpf.asm import sdiv, smod

    assert alu_result(alu(Alu.DIV, R1, R2), 7, 0) == 0
    assert alu_result(alu(Alu.MOD, R1, R2), 7, 0) == 7
    assert alu_result(sdiv(R1, R2), (-7) & (2**64 - 1), 2) == (-3) & (2**64 - 1)
    assert alu_result(smod(R1, R2), (-7) & (2**64 - 1), 2) == (-1) & (2**64 - 1)
    assert alu_result(alu(Alu.ADD, R1, -1, w32=True), 0, 0) == 0xFFFFFFFF
    assert alu_result(alu(Alu.ADD, R1, -1), 0, 0) == 2**64 - 1
    assert alu_result(alu(Alu.LSH, R1, R2), 1, 65) == 2
    assert alu_result(alu(Alu.ARSH, R1, 4, w32=True), 0x80000000, 0) == 0xF8000000


def test_analysis_is_shared_by_passes_on_unchanged_code() -> None:
    code = Code.from_program(prog(mov(R0, 0), exit_()))
    assert Analysis.of(code, 6) is Analysis.of(code, 6)
    assert Analysis.of(code.copy(), 6) is not Analysis.of(code, 6)


def test_analysis_memo_is_shared_bounded_and_never_confuses_codes() -> None:
    ps = sample_programs()[1]
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
