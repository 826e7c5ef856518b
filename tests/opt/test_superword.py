"""The ``superword`` pass beyond its text fixtures (``filetests/superword/``): a whole run of byte stores
merges in one round."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R10,
    exit_,
    mov,
    st,
)
from capsule.opt.pipeline import make_passes
from capsule.opt.rewrite import Code

from .fixtures import SYS, prog


def test_superword_merges_a_run_of_bytes_into_one_store_in_one_round() -> None:
    ps = prog(*(st(1, R10, -8 + k, 0) for k in range(8)), mov(R0, 0), exit_(), ptype=SYS)
    code, n = make_passes(["superword"])[0].run(Code.from_program(ps), ps.type)
    from capsule.bpf.disasm import disassemble

    assert disassemble(code.insns)[0] == "*(u64 *)(r10 - 0x8) = 0x0" and len(code.insns) == 3




