"""Reuse a value another register already holds instead of building it again.

- ``ld_imm64`` (two slots) of a map, a global data address or a 64-bit constant becomes ``rX = rY`` (one slot)
  when ``rY`` holds what the same ``ld_imm64`` put there, on every path;
- ``rX = r10; rX += K`` (a stack address, rebuilt before each helper call) becomes ``rX = rY`` when ``rY``
  holds ``r10 + K`` on every path, and goes entirely when ``rX`` itself still does.

"Holds" is decided by a must-analysis (``held``, solved by ``regfacts.must_hold``): a register holds a *recipe*
(the ``ld_imm64``'s source kind, immediate and relocation, or ``fp + K``) when every path to that point built it
that way and nothing wrote the register since. Unlike the value analysis, which calls a map value pointer just
"map value of map M at offset 0" whether it came from an ``ld_imm64`` or from a lookup (different elements), a
recipe says exactly how the value was made. The copy is a ``mov``, which the verifier tracks like the original:
the same pointer type, map, offset and range.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import FP, Alu, Class, Pseudo, Src

from ..analysis import Analysis
from ..effects import LD_IMM64, regs_of
from ..regfacts import Held, must_hold
from .base import Edits, Pass

_MOV64_X = int(Class.ALU64 | Alu.MOV | Src.X)
_ADD64_K = int(Class.ALU64 | Alu.ADD | Src.K)
# ld_imm64 forms whose value is fixed at load time: constants, maps by fd or index, map values by fd or index
_REUSABLE = (Pseudo.NONE, Pseudo.MAP_FD, Pseudo.MAP_VALUE, Pseudo.MAP_IDX, Pseudo.MAP_IDX_VALUE)

# ("ld", src, imm, ref) or ("fp", K, 0, None): the facts of ``regfacts.must_hold`` (one tuple shape for both, so
# that they are one type)
Recipe = tuple[str, int, int, str | None]


def _fp(k: int) -> Recipe:
    """The recipe of ``r10 + k``."""
    return ("fp", k, 0, None)


def _step(insns: list[Insn], targets: dict[int, int], defs: list[int], i: int, held: list[Recipe | None]) -> None:
    """Update ``held`` (one entry per register) for instruction ``i``."""
    d = defs[i]
    if not d:
        return
    ins = insns[i]
    c = ins.code
    if c == _MOV64_X and not ins.off:
        held[ins.dst] = _fp(0) if ins.src == FP else held[ins.src]
    elif c == _ADD64_K and not ins.off:
        had = held[ins.dst]
        held[ins.dst] = _fp(had[1] + ins.imm) if had is not None and had[0] == "fp" else None
    elif c == LD_IMM64:
        ok = ins.src in _REUSABLE and i not in targets
        held[ins.dst] = ("ld", ins.src, ins.imm, ins.ref) if ok else None
    else:
        for r in regs_of(d):
            held[r] = None


def held(a: Analysis, at: set[int]) -> dict[int, Held[Recipe]]:
    """The recipe each register holds before each (reachable) instruction of ``at``."""
    insns, targets = a.code.insns, a.code.targets
    defs = [e.defs for e in a.effects]

    def step(i: int, cur: list[Recipe | None]) -> None:
        _step(insns, targets, defs, i, cur)

    return must_hold(a, step, at)


class Reuse(Pass):
    name = "reuse"
    summary = "ld_imm64 and r10+K stack addresses taken from a register that already holds them"

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        starts = a.block_starts
        n = len(insns)
        at = {i for i, ins in enumerate(insns) if ins.code == LD_IMM64 or (ins.code == _MOV64_X and ins.src == FP)}
        if not at:
            return
        h = held(a, at)
        for i in sorted(h):
            st = h[i]
            ins = insns[i]
            c = ins.code
            if c == LD_IMM64:
                if ins.src not in _REUSABLE or i in a.code.targets:
                    continue
                want = ("ld", ins.src, ins.imm, ins.ref)
                src = next((r for r in range(10) if st[r] == want), None)
                if src is None or not e.free(i):
                    continue
                if src == ins.dst:
                    e.delete.add(i)
                else:
                    e.replace[i] = Insn(_MOV64_X, ins.dst, src, sym=ins.sym)
                e.rewrites += 1
            elif c == _MOV64_X and ins.src == FP and not ins.off and i + 1 < n and i + 1 not in starts:
                nxt = insns[i + 1]
                if nxt.code != _ADD64_K or nxt.dst != ins.dst or nxt.off:
                    continue
                want = _fp(nxt.imm)
                src = ins.dst if st[ins.dst] == want else next((r for r in range(10) if st[r] == want), None)
                if src is None or not e.free(i, i + 1):
                    continue
                if src == ins.dst:
                    e.delete.update((i, i + 1))
                else:
                    e.replace[i] = Insn(_MOV64_X, ins.dst, src, sym=ins.sym)
                    e.delete.add(i + 1)
                e.rewrites += 1


__all__ = ["Reuse", "held"]
