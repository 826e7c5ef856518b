"""Register liveness (``capsule.opt.liveness``): an edited version's is that of a fresh analysis."""

from __future__ import annotations

from capsule.bpf.asm import R0, R2, mov
from capsule.opt.analysis import Analysis
from capsule.opt.rewrite import Code

from .fixtures import two_functions


def test_register_liveness_of_an_edited_version_is_that_of_a_fresh_analysis() -> None:
    from capsule.opt import liveness as lv

    ps = two_functions()
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
