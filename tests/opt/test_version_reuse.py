"""What the optimizer reuses from one version of the code to the next must give the results of a fresh start:
the value analysis' per-function and per-block results, and the pipeline skipping a pass over code it already
left unchanged."""

from __future__ import annotations

from capsule.bpf.asm import R0, R1, R2, R3, R6, R10, alu, call, exit_, jmp, ldx, mov, st, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.kernel.consts import ProgType
from capsule.opt import values
from capsule.opt.analysis import Analysis
from capsule.opt.passes import Edits, Pass
from capsule.opt.pipeline import make_passes, optimize_program
from capsule.opt.rewrite import Code
from capsule.opt.values import analyze_values

from .fixtures import prog


def _two_functions():
    # main spills a constant, calls f, and has a loop; f computes on its argument
    return prog(mov(R6, 0), st(8, R10, -8, 7), mov(R1, 1), call("f"), alu(Alu.ADD, R6, 1), mov(R2, 3),
                jmp(Jmp.JLT, R6, 10, "top"), ldx(8, R0, R10, -8), exit_(),
                mov(R0, R1), alu(Alu.ADD, R0, 2), mov(R3, 5), stx(8, R10, -16, R3), ldx(8, R0, R10, -16), exit_(),
                labels={"top": 4, "f": 9})


def _fresh(code: Code, prog_type: int) -> list:
    values.forget()
    return analyze_values(Analysis(code, prog_type).cfg, prog_type).before


def _analysed(code: Code, prog_type: int) -> list:
    return analyze_values(Analysis(code, prog_type).cfg, prog_type).before


def test_edited_versions_get_the_states_of_a_fresh_analysis() -> None:
    ps = _two_functions()
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


class _Counting(Pass):
    """Wraps a pass, counting the codes it is run on."""

    def __init__(self, inner: Pass) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[Code] = []

    def find(self, a: Analysis, e: Edits) -> None:
        self.seen.append(a.code)
        self.inner.find(a, e)


class _Unskippable(_Counting):
    """A ``run`` of its own that changes the code after ``Pass.run`` (here only its identity)."""

    def run(self, code: Code, prog_type: int) -> tuple[Code, int]:
        out = Pass.run(self, code, prog_type)
        return out[0].copy(), out[1]  # not the code its last round looked at


def test_pipeline_skips_a_pass_on_code_it_left_unchanged_with_the_same_result() -> None:
    # constprop folds and removes the dead mov in the first round; nothing changes after it, so in the second
    # round every pass would meet the code it already found nothing in
    ps = prog(mov(R1, 4), alu(Alu.ADD, R1, 1), mov(R0, R1), exit_())
    counted = [_Counting(p) for p in make_passes()]
    every = [_Unskippable(p) for p in make_passes()]
    res = optimize_program(ps, counted)
    assert res.optimized.insns == optimize_program(ps, every).optimized.insns
    assert [(r.name, r.rewrites, r.after) for r in res.records] == [
        (r.name, r.rewrites, r.after) for r in optimize_program(ps, make_passes()).records]
    for p in counted:
        assert len({id(c) for c in p.seen}) == len(p.seen)  # never asked twice about the same code
    assert sum(len(p.seen) for p in counted) < sum(len(p.seen) for p in every)
    # in the second round only the passes before constprop meet code they have not seen; without skipping,
    # every pass runs again
    later = [p.name for p in counted][[p.name for p in counted].index("constprop") + 1:]
    assert later and all(len(p.seen) == 1 for p in counted if p.name in later)
    assert all(len(p.seen) == 2 for p in every if p.name in later)


def test_register_liveness_of_an_edited_version_is_that_of_a_fresh_analysis() -> None:
    from capsule.opt import liveness as lv

    ps = _two_functions()
    code = Code.from_program(ps)
    lv.forget()
    first = lv.liveness(Analysis(code, ps.type).cfg)
    # r2 = 3 in main's loop is dead; making it feed r0 makes it live there, and nowhere else changes
    edited = code.edit(replace_with={7: mov(R0, R2)})
    got = lv.liveness(Analysis(edited, ps.type).cfg)
    lv.forget()
    fresh = lv.liveness(Analysis(edited, ps.type).cfg)
    assert (got.live_out, got.live_in, got.func_live_in) == (fresh.live_out, fresh.live_in, fresh.func_live_in)
    assert not first.live_out[5] & (1 << R2) and got.live_out[5] & (1 << R2)
    assert got.live_in[9:] == first.live_in[9:]  # f, untouched
    # the same instructions with another live set after them are not reused
    again = lv.liveness(Analysis(code, ps.type).cfg)
    assert again.live_out == first.live_out
