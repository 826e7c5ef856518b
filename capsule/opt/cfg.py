"""Control-flow graph over ``Code``: functions (subprograms), basic blocks, successors, the call graph.

Functions are cut at the starts ``Code.funcs`` records (func_info plus every BPF-to-BPF call or ``ld_imm64``
function target). Inside a function, a block starts at the function entry, at every jump target and after
every jump or exit. ``may_goto`` is a conditional jump (fall through, or jump when the budget runs out). A
call is not a block boundary: control comes back to the next instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.opcodes import OP_MASK, CallKind, Jmp

from .effects import CALL, EXIT, JUMPS, LD_IMM64
from .rewrite import Code

__all__ = ["Block", "Function", "CFG", "build_cfg"]

_JA = int(Jmp.JA)
_BPF_CALL = int(CallKind.BPF)
_SHAPING = JUMPS | {EXIT, CALL, LD_IMM64}  # opcodes that end blocks or name other functions


@dataclass
class Block:
    start: int
    end: int  # exclusive instruction index
    succs: list[int] = field(default_factory=list)  # successor block starts
    preds: list[int] = field(default_factory=list)

    def indices(self) -> range:
        return range(self.start, self.end)


@dataclass
class Function:
    start: int
    end: int
    blocks: dict[int, Block]  # by start index, in order
    calls: list[int] = field(default_factory=list)  # callee function starts (BPF-to-BPF)
    callbacks: list[int] = field(default_factory=list)  # functions whose address is taken here
    _rpo: list[int] | None = field(default=None, repr=False, compare=False)

    def block_of(self, i: int) -> Block:
        best = self.start
        for s in self.blocks:
            if s <= i:
                best = s
            else:
                break
        return self.blocks[best]

    def reachable(self) -> set[int]:
        """Block starts reachable from the entry."""
        seen = {self.start}
        work = [self.start]
        while work:
            b = self.blocks[work.pop()]
            for s in b.succs:
                if s not in seen:
                    seen.add(s)
                    work.append(s)
        return seen

    def rpo(self) -> list[int]:
        """Reachable block starts in reverse post-order (a good order for forward data flow); computed once
        (every data flow asks for it)."""
        if self._rpo is None:
            self._rpo = self._compute_rpo()
        return self._rpo

    def _compute_rpo(self) -> list[int]:
        seen: set[int] = set()
        order: list[int] = []
        stack: list[tuple[int, int]] = [(self.start, 0)]
        seen.add(self.start)
        while stack:
            b, k = stack.pop()
            succs = self.blocks[b].succs
            if k < len(succs):
                stack.append((b, k + 1))
                s = succs[k]
                if s not in seen:
                    seen.add(s)
                    stack.append((s, 0))
            else:
                order.append(b)
        return order[::-1]


@dataclass
class CFG:
    code: Code
    functions: dict[int, Function]  # by start index
    func_of: list[int]  # instruction index -> function start

    def function(self, i: int) -> Function:
        return self.functions[self.func_of[i]]

    def callee_order(self) -> list[int]:
        """Function starts with every callee before its callers (BPF forbids recursion)."""
        order: list[int] = []
        state: dict[int, int] = {}
        for f in self.functions:
            self._visit(f, state, order)
        return order

    def _visit(self, f: int, state: dict[int, int], order: list[int]) -> None:
        # a method, not a closure: a recursive closure is a reference cycle (the function and its own cell)
        if state.get(f):
            return  # done, or on the current path (a cycle would be rejected by the verifier; do not loop)
        state[f] = 1
        fn = self.functions[f]
        for c in fn.calls + fn.callbacks:
            self._visit(c, state, order)
        state[f] = 2
        order.append(f)


def build_cfg(code: Code) -> CFG:
    n = len(code.insns)
    insns = code.insns
    targets = code.targets
    opcodes = [ins.code for ins in insns]
    # the few instructions that shape the graph, found in one scan of the opcodes
    special = [i for i, c in enumerate(opcodes) if c in _SHAPING]
    k = 0
    func_of = [0] * n
    functions: dict[int, Function] = {}
    for fs, fe in code.func_bounds():
        func_of[fs:fe] = [fs] * (fe - fs)
        leaders = {fs}
        calls: list[int] = []
        callbacks: list[int] = []
        while k < len(special) and special[k] < fs:
            k += 1
        while k < len(special) and special[k] < fe:
            i = special[k]
            k += 1
            c = opcodes[i]
            if c in JUMPS:
                t = targets[i]
                if not fs <= t < fe:
                    raise ValueError(f"jump at {i} leaves its function ({fs}..{fe})")
                leaders.add(t)
                leaders.add(i + 1)
            elif c == EXIT:
                leaders.add(i + 1)
            elif c == CALL:
                if insns[i].src == _BPF_CALL:
                    calls.append(targets[i])
            elif i in targets:  # ld_imm64 of a function
                callbacks.append(targets[i])
        leaders.discard(fe)
        starts = sorted(leaders)
        blocks: dict[int, Block] = {}
        for j, s in enumerate(starts):
            e = starts[j + 1] if j + 1 < len(starts) else fe
            b = Block(s, e)
            last = opcodes[e - 1]
            if last == EXIT:
                pass
            elif last in JUMPS:
                # JA (and gotol) always jump; may_goto (JCOND) may fall through
                if last & OP_MASK != _JA and e < fe:
                    b.succs.append(e)
                t = targets[e - 1]
                if t not in b.succs:
                    b.succs.append(t)
            elif e < fe:
                b.succs.append(e)
            blocks[s] = b
        for b in blocks.values():
            for s in b.succs:
                blocks[s].preds.append(b.start)
        functions[fs] = Function(fs, fe, blocks, calls, callbacks)
    return CFG(code, functions, func_of)
