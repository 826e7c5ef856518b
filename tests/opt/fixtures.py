"""Small bytecode fixtures for the optimizer's unit tests: assemble, wrap in a ProgramSpec, run one pass."""

from __future__ import annotations

from capsule.bpf.asm import Builder
from capsule.bpf.disasm import disassemble
from capsule.bpf.insn import Insn
from capsule.bpf.spec import ProgramSpec
from capsule.kernel.consts import ProgType
from capsule.opt.passes import PASSES
from capsule.opt.rewrite import Code


def prog(*insns: Insn, ptype: int = ProgType.XDP, labels: dict[str, int] | None = None) -> ProgramSpec:
    b = Builder()
    for k, ins in enumerate(insns):
        for name, at in (labels or {}).items():
            if at == k:
                b.label(name)
        b.emit(ins)
    return ProgramSpec("t", "xdp", ptype, b.assemble())


def run_pass(name: str, ps: ProgramSpec) -> tuple[list[str], int]:
    """The program's text after pass ``name``, and how many rewrites it made."""
    code, n = PASSES[name]().run(Code.from_program(ps), ps.type)
    return disassemble(code.to_program(ps).insns), n


def text(ps: ProgramSpec) -> list[str]:
    return disassemble(ps.insns)
