"""Code: index-based editing that really removes instructions and fixes every reference."""

from __future__ import annotations

import pytest

from capsule.bpf.asm import R0, R1, R2, call, exit_, ja, jmp, ld_func, ld_imm64, mov
from capsule.bpf.opcodes import Jmp
from capsule.bpf.spec import FuncInfo, LineInfo, ProgramSpec
from capsule.opt.rewrite import Code, RewriteError

from .fixtures import text


def _spec() -> ProgramSpec:
    insns = [
        mov(R0, 0),  # 0
        ld_imm64(R2, 1 << 40),  # 1 (slots 1-2)
        jmp(Jmp.JEQ, R1, 0, 3),  # 2 (slot 3) -> slot 7 (index 6)
        mov(R0, 1),  # 3
        call(4),  # 4 (slot 5) -> slot 10 (index 8)
        ld_func(R2, 0),  # 5 (slots 6-7): patched below
        exit_(),  # 6 (slot 8)
        exit_(),  # 7 (slot 9)  (never a target)
        mov(R0, 7),  # 8 (slot 10): subprogram
        exit_(),  # 9
    ]
    # ld_func at slot 6 -> slot 10: offset 3
    insns[5].imm = 3
    insns[2].off = 4  # slot 3 + 1 + 4 = slot 8 (index 6)
    lines = [LineInfo(o, 0, 0, o + 1, 0) for o in (0, 1, 3, 5, 10)]
    return ProgramSpec("p", "xdp", 6, insns, func_infos=[FuncInfo(0, 5), FuncInfo(10, 6)], line_infos=lines)


def test_round_trip_keeps_everything() -> None:
    ps = _spec()
    back = Code.from_program(ps).to_program(ps)
    assert back.insns == ps.insns
    assert back.func_infos == ps.func_infos and back.line_infos == ps.line_infos


def test_deleting_moves_jumps_calls_func_addresses_and_btf_ext() -> None:
    ps = _spec()
    code = Code.from_program(ps)
    assert code.targets == {2: 6, 4: 8, 5: 8}
    new = code.edit(delete={1, 3}).to_program(ps)
    # slots: mov(0) jeq(1) call(2) ld_func(3-4) exit(5) exit(6) sub: mov(7) exit(8)
    assert new.insns[1].off == 5 - 1 - 1  # jeq -> exit at slot 5
    assert new.insns[2].imm == 7 - 2 - 1  # call -> slot 7
    assert new.insns[3].imm == 7 - 3 - 1  # ld_func -> slot 7
    assert [f.insn_off for f in new.func_infos] == [0, 7]
    # the record of the deleted ld_imm64 would move to the jeq, which has its own, so it goes
    assert [(li.insn_off, li.line) for li in new.line_infos] == [(0, 1), (1, 4), (2, 6), (7, 11)]
    lines = [LineInfo(o, 0, 0, o + 1, 0) for o in (0, 1, 10)]
    ps2 = ProgramSpec("p", "xdp", 6, ps.insns, func_infos=ps.func_infos, line_infos=lines)
    moved = Code.from_program(ps2).edit(delete={1}).to_program(ps2)
    assert [(li.insn_off, li.line) for li in moved.line_infos] == [(0, 1), (1, 2), (8, 11)]


def test_deleting_a_function_start_moves_the_function() -> None:
    ps = _spec()
    new = Code.from_program(ps).edit(delete={8}).to_program(ps)
    assert [f.insn_off for f in new.func_infos] == [0, 10]
    assert new.insns[4].imm == 10 - 5 - 1


def test_replacement_keeps_or_changes_target() -> None:
    ps = _spec()
    code = Code.from_program(ps)
    new = code.edit(replace_with={2: ja(0)}).to_program(ps)
    assert text(new)[2] == "goto +0x4"
    new = code.edit(replace_with={2: ja(0)}, retarget={2: 7}).to_program(ps)
    assert text(new)[2] == "goto +0x5"


def test_emptying_a_function_is_refused() -> None:
    ps = _spec()
    with pytest.raises(RewriteError):
        Code.from_program(ps).edit(delete={8, 9})
