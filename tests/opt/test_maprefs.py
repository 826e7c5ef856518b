"""Dead-code removal never drops the last reference to a map (it binds arenas and keeps maps alive)."""

from __future__ import annotations

from capsule.bpf.asm import R0, R1, R2, exit_, jmp, ld_map_fd, mov
from capsule.bpf.disasm import disassemble
from capsule.bpf.opcodes import Jmp
from capsule.bpf.spec import LineInfo
from capsule.opt.maprefs import keep_map_refs, map_refs
from capsule.opt.pipeline import make_passes, optimize_program
from capsule.opt.rewrite import Code
from tests.opt.fixtures import prog


def _dead_ref_prog():
    # r2 = &arena (dead); if r1 > 0 goto L; r0 = 1; exit; L: r0 = 2; exit
    return prog(ld_map_fd(R2, "arena"), mov(R0, 1), jmp(Jmp.JGT, R1, 0, "L"), exit_(), mov(R0, 2), exit_(),
                labels={"L": 4})


def test_lost_reference_is_put_back_at_entry_with_jumps_and_lines_fixed() -> None:
    ps = _dead_ref_prog()
    before = Code.from_program(ps)
    before.lines = [(0, LineInfo(0, 1, 2, 10, 1)), (4, LineInfo(0, 1, 2, 14, 1))]
    after = before.edit({0})
    assert map_refs(after.insns) == set()
    kept = keep_map_refs(before, after)
    assert map_refs(kept.insns) == {"arena"}
    assert kept.insns[0].dst == 0 and kept.insns[0].ref == "arena"
    assert kept.lines[0][0] == 0 and kept.lines[1][0] == 4  # the second record follows its instruction
    out = disassemble(kept.to_program(ps).insns)
    assert out[1:] == disassemble(after.to_program(ps).insns)


def test_unchanged_references_leave_the_code_alone() -> None:
    before = Code.from_program(_dead_ref_prog())
    assert keep_map_refs(before, before) is before


def test_pipeline_keeps_a_dead_map_reference() -> None:
    ps = _dead_ref_prog()
    res = optimize_program(ps, make_passes())
    assert map_refs(res.optimized.insns) == {"arena"}
