"""Small bytecode fixtures for the optimizer's unit tests: assemble, wrap in a ProgramSpec, run one pass; and the
programs several test modules share."""

from __future__ import annotations

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
    Builder,
    alu,
    call,
    call_helper,
    exit_,
    jmp,
    ld_map_fd,
    ld_map_value,
    ldx,
    mov,
    st,
    stx,
)
from capsule.bpf.disasm import disassemble
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import ProgramSpec
from capsule.bpf.uapi import ProgType
from capsule.opt.local import WINDOW
from capsule.opt.passes import PASSES
from capsule.opt.rewrite import Code

SYS = ProgType.SYSCALL


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


# -- programs shared by several modules ----------------------------------------------------------------------
MV = (ld_map_value(R7, ".bss", 0), ld_map_value(R8, ".data", 0))  # r7, r8: two map values (different maps)
FILLER = tuple(alu(Alu.ADD, R0, 1) for _ in range(WINDOW + 6))  # longer than the windowed scans look


def branchy_prog() -> ProgramSpec:
    """Copies, shifts and a branch around a block longer than the windowed def-use scans."""
    return prog(*MV, mov(R6, R1), mov(R2, R6), ldx(4, R3, R8, 0), jmp(Jmp.JEQ, R3, 0, "b"),
                mov(R4, R3), alu(Alu.LSH, R4, 8), mov(R3, R4), *FILLER, stx(4, R7, 0, R3), mov(R2, R6),
                mov(R9, R4, w32=True),
                ldx(1, R5, R2, 0), alu(Alu.OR, R5, R3), stx(1, R7, 4, R5), mov(R0, 0), exit_(),
                labels={"b": 2 + 4 + 3 + len(FILLER) + 3})


def two_functions() -> ProgramSpec:
    # main spills a constant, calls f, and has a loop; f computes on its argument
    return prog(mov(R6, 0), st(8, R10, -8, 7), mov(R1, 1), call("f"), alu(Alu.ADD, R6, 1), mov(R2, 3),
                jmp(Jmp.JLT, R6, 10, "top"), ldx(8, R0, R10, -8), exit_(),
                mov(R0, R1), alu(Alu.ADD, R0, 2), mov(R3, 5), stx(8, R10, -16, R3), ldx(8, R0, R10, -16), exit_(),
                labels={"top": 4, "f": 9})


def sample_programs() -> list[ProgramSpec]:
    """A program with a callee, one with a loop, one that spills a map pointer around a lookup."""
    with_callee = prog(mov(R1, 1), call("f"), st(1, R10, -4, 0), st(1, R10, -3, 0), mov(R0, 0), exit_(),
                       mov(R0, R1), alu(Alu.ADD, R0, 0), exit_(), labels={"f": 6})
    loop = prog(mov(R6, 0), alu(Alu.ADD, R6, 1), mov(R2, 3), alu(Alu.ADD, R2, 1), jmp(Jmp.JLT, R6, 10, "top"),
                stx(8, R10, -8, R6), ldx(8, R0, R10, -8), exit_(), labels={"top": 1})
    spills = prog(ld_map_fd(R1, "m"), stx(8, R10, -16, R1), mov(R2, R10), alu(Alu.ADD, R2, -8), st(4, R10, -8, 0),
                  ldx(8, R1, R10, -16), call_helper(1), jmp(Jmp.JEQ, R0, 0, "out"), ldx(4, R3, R0, 0),
                  alu(Alu.LSH, R3, 32), alu(Alu.RSH, R3, 32), mov(R0, R3), exit_(), mov(R0, 0), exit_(),
                  labels={"out": 13})
    return [with_callee, loop, spills]
