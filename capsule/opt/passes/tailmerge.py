"""Tail merging (cross-jumping): two identical runs of code that end the same way become one.

clang duplicates tails to save a jump (the same ``bpf_probe_read`` sequence or ``r0 = 0; exit`` copied into
each branch); the corpus shows it as the commonest waste the other passes leave behind (see
``scripts/opt_waste.py``). Two runs of one function match when they end with ``exit``, or with ``goto`` the
same place, and are equal instruction by instruction going backwards, where jumps, calls and function
addresses must go to the same place: the same instruction, or the corresponding one of their own run. One run
(the one nothing falls into, when there is one) is then removed, every jump into it is sent to the
corresponding instruction of the other. A run entered by falling through can only go by starting with a
``goto`` to the other; that saves slots but adds the ``goto`` to what the verifier processes on every path
through it (unless its state pruning happens to catch the merged run), and the kernel checker refuses any
result that raises the verifier's processed instructions, taking the pass's other merges with it. So by
default only runs that nothing falls into are removed; ``TailMerge(goto=True)`` also takes the others.

Why the verifier still accepts the result: every path executes exactly the instructions it executed before,
so every check it made on a path it makes again; the merge only joins paths (which can only help its state
pruning), and it creates no new cycle (both runs leave to the same places, so any cycle through the kept run
was a cycle through the removed one before).
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Class, Jmp

from ..analysis import Analysis
from ..effects import EXIT, LD_IMM64
from ..rewrite import has_target
from .base import Edits, Pass

_JA = int(Class.JMP | Jmp.JA)
_GOTOL = int(Class.JMP32 | Jmp.JA)
_CALL = int(Class.JMP | Jmp.CALL)
Shape = tuple[int | str | None, ...]  # an instruction's fields that a merge needs equal


def _shape(ins: Insn) -> Shape:
    """What must be equal besides the target: the immediate is a PC-relative offset for ``gotol``, BPF calls
    and function addresses, and a compared constant for conditional jumps."""
    if has_target(ins) and (ins.code in (_GOTOL, _CALL) or ins.code == LD_IMM64):
        return (ins.code, ins.dst, ins.src, ins.ref)
    if has_target(ins):
        return (ins.code, ins.dst, ins.src, ins.imm, ins.ref)
    return (ins.code, ins.dst, ins.src, ins.off, ins.imm, ins.ref)


class TailMerge(Pass):
    name = "tailmerge"
    summary = "identical code runs ending in the same exit or goto merged into one (cross-jumping)"

    def __init__(self, goto: bool = False) -> None:
        self.goto = goto  # also merge runs entered by falling through, starting them with a goto

    def find(self, a: Analysis, e: Edits) -> None:
        code = a.code
        insns = code.insns
        targets = code.targets
        reach = self._reachable(a)
        shapes = [_shape(ins) for ins in insns]
        incoming: dict[int, list[int]] = {}
        for src, t in targets.items():
            incoming.setdefault(t, []).append(src)
        kept: set[int] = set()  # instructions other merges now jump into: never removed this round
        for fn in a.cfg.functions.values():
            groups: dict[Shape, list[int]] = {}
            for i in range(fn.start, fn.end):
                c = insns[i].code
                if not reach[i]:
                    continue
                if c == EXIT:
                    groups.setdefault(("exit",), []).append(i)
                elif c == _JA:
                    groups.setdefault(("ja", targets[i]), []).append(i)
            for ends in groups.values():
                if len(ends) < 2:
                    continue
                for k2 in range(len(ends) - 1, 0, -1):
                    best = None
                    for k1 in range(k2):
                        n = self._match(a, shapes, reach, fn.start, ends[k1], ends[k2])
                        if n and (best is None or n > best[0]):
                            best = (n, ends[k1])
                    if best is not None:
                        self._merge(a, e, reach, best[1], ends[k2], best[0], incoming, kept)

    @staticmethod
    def _reachable(a: Analysis) -> list[bool]:
        out = [False] * len(a.code.insns)
        for fn in a.cfg.functions.values():
            for bs in fn.reachable():
                b = fn.blocks[bs]
                out[b.start:b.end] = [True] * (b.end - b.start)
        return out

    @staticmethod
    def _match(a: Analysis, shapes: list[Shape], reach: list[bool], fstart: int, e1: int, e2: int) -> int:
        """How many instructions, ending at ``e1`` and ``e2`` (``e1 < e2``), are equivalent."""
        targets = a.code.targets
        k = 0
        while True:
            p1, p2 = e1 - k, e2 - k
            if p1 < fstart or p2 <= e1 or not reach[p1] or not reach[p2] or shapes[p1] != shapes[p2]:
                return k
            t1, t2 = targets.get(p1), targets.get(p2)
            if t1 != t2 and not (t1 is not None and t2 is not None and p1 < t1 <= e1 and p2 < t2 <= e2
                                 and t1 - p1 == t2 - p2):
                return k
            k += 1

    @staticmethod
    def _falls_into(a: Analysis, reach: list[bool], s: int) -> bool:
        if s in a.code.funcs or s == 0:
            return False
        return a.code.insns[s - 1].code not in (EXIT, _JA, _GOTOL) and reach[s - 1]

    def _merge(self, a: Analysis, e: Edits, reach: list[bool], e1: int, e2: int, n: int, incoming: dict[int, list[int]],
               kept: set[int]) -> None:
        insns = a.code.insns
        s1, s2 = e1 - n + 1, e2 - n + 1
        # remove the run nothing falls into (saves the goto); else the later one
        keep, drop = (s1, s2)
        if self._falls_into(a, reach, s2) and not self._falls_into(a, reach, s1):
            keep, drop = s2, s1
        if drop in a.code.funcs:
            return  # a function's entry stays where calls and func_info find it
        goto = self._falls_into(a, reach, drop)
        if goto and not self.goto:
            return
        slots = sum(insns[drop + k].slots() for k in range(n))
        if slots - goto < 1:
            return
        run_keep, run_drop = range(keep, keep + n), range(drop, drop + n)
        if not e.free(*run_keep, *run_drop) or not kept.isdisjoint(run_drop):
            return
        if any(i in e.retarget for i in (*run_keep, *run_drop)):
            return
        # jumps into the removed run from outside it go to the corresponding kept instruction
        moves: dict[int, int] = {}
        for k in range(n):
            for src in incoming.get(drop + k, ()):
                if drop <= src < drop + n:
                    continue
                if not e.free(src) or src in e.retarget:
                    return
                moves[src] = keep + k
        if goto:
            e.replace[drop] = Insn(_JA, sym=insns[drop].sym)
            e.retarget[drop] = keep
            e.delete.update(range(drop + 1, drop + n))
        else:
            e.delete.update(run_drop)
        e.retarget.update(moves)
        kept.update(run_keep)
        e.rewrites += 1


__all__ = ["TailMerge"]
