"""Control-flow graph over ``Code``: functions (subprograms), basic blocks, successors, the call graph.

Functions are cut at the starts ``Code.funcs`` records (func_info plus every BPF-to-BPF call or ``ld_imm64``
function target). Inside a function, a block starts at the function entry, at every jump target and after
every jump or exit. ``may_goto`` is a conditional jump (fall through, or jump when the budget runs out). A
call is not a block boundary: control comes back to the next instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.opcodes import CallKind, Class, Jmp

from .rewrite import Code

__all__ = ["Block", "Function", "CFG", "build_cfg"]


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
        """Reachable block starts in reverse post-order (a good order for forward data flow)."""
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

        def visit(f: int) -> None:
            if state.get(f) == 2:
                return
            if state.get(f) == 1:
                return  # a cycle would be rejected by the verifier; do not loop
            state[f] = 1
            for c in self.functions[f].calls + self.functions[f].callbacks:
                visit(c)
            state[f] = 2
            order.append(f)

        for f in self.functions:
            visit(f)
        return order


def _ends_block(code: Code, i: int) -> bool:
    ins = code.insns[i]
    return ins.is_jump or ins.is_exit


def build_cfg(code: Code) -> CFG:
    n = len(code.insns)
    func_of = [0] * n
    functions: dict[int, Function] = {}
    for fs, fe in code.func_bounds():
        for i in range(fs, fe):
            func_of[i] = fs
        leaders = {fs}
        for i in range(fs, fe):
            ins = code.insns[i]
            if ins.is_jump:
                t = code.targets[i]
                if not fs <= t < fe:
                    raise ValueError(f"jump at {i} leaves its function ({fs}..{fe})")
                leaders.add(t)
            if _ends_block(code, i) and i + 1 < fe:
                leaders.add(i + 1)
        starts = sorted(leaders)
        blocks: dict[int, Block] = {}
        for k, s in enumerate(starts):
            e = starts[k + 1] if k + 1 < len(starts) else fe
            blocks[s] = Block(s, e)
        fn = Function(fs, fe, blocks)
        for b in blocks.values():
            last = code.insns[b.end - 1]
            succs: list[int] = []
            if last.is_exit:
                pass
            elif last.is_jump:
                op = last.code & 0xF0
                uncond = op == Jmp.JA and last.cls in (Class.JMP, Class.JMP32)
                if not uncond and b.end < fe:
                    succs.append(b.end)
                t = code.targets[b.end - 1]
                if t not in succs:
                    succs.append(t)
            elif b.end < fe:
                succs.append(b.end)
            b.succs = succs
        for b in blocks.values():
            for s in b.succs:
                blocks[s].preds.append(b.start)
        for i in range(fs, fe):
            ins = code.insns[i]
            if ins.is_call and ins.src == CallKind.BPF:
                fn.calls.append(code.targets[i])
            elif ins.is_ld_imm64 and i in code.targets:
                fn.callbacks.append(code.targets[i])
        functions[fs] = fn
    return CFG(code, functions, func_of)
