"""Editable program code for the optimizer: instructions addressed by index, edits that really remove them.

``ProgramSpec.insns`` keeps jumps, BPF-to-BPF calls and ``ld_imm64`` of functions as slot-relative offsets, and
func_info / line_info as slot offsets. Passes want none of that: they delete and replace instructions. ``Code``
turns every relative reference into the *index* of the target instruction, keeps function starts and line
records by index, and ``edit`` applies a batch of deletions and replacements, moving every reference that
pointed at a deleted instruction to the next instruction that survives (which is what would have executed
next). ``to_program`` turns the result back into slot offsets; symbol sizes follow, because
``capsule.bpf.elf_write`` derives them from the function boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import accumulate

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CLASS_MASK, LD_IMM64, CallKind, Class, Pseudo
from capsule.bpf.spec import FuncInfo, LineInfo, ProgramSpec
from capsule.ints import MASK32, fits_signed, signed

__all__ = ["Code", "RewriteError", "has_target"]


class RewriteError(ValueError):
    """An edit that would break the program's structure (e.g. emptying a function)."""


_MAY_TARGET = (Class.LD, Class.JMP, Class.JMP32)  # the classes of ld_imm64, calls and jumps


def has_target(ins: Insn) -> bool:
    """Whether ``ins`` refers to another instruction of the program by relative offset."""
    c = ins.code
    if c & CLASS_MASK not in _MAY_TARGET:
        return False  # neither a jump, a call nor ld_imm64 (the common case, decided without properties)
    if ins.is_jump:
        return True
    if ins.is_call and ins.src == CallKind.BPF:
        return True
    return ins.is_ld_imm64 and ins.src == Pseudo.FUNC


def slot_offsets(insns: list[Insn]) -> list[int]:
    """The slot at which each instruction starts (``capsule.bpf.insn.slot_offsets``, without a method call
    per instruction)."""
    return list(accumulate((2 if ins.code == LD_IMM64 else 1 for ins in insns), initial=0))[:-1] if insns else []


def count_slots(insns: list[Insn]) -> int:
    codes = [ins.code for ins in insns]
    return len(codes) + codes.count(LD_IMM64)


def _rel(ins: Insn) -> int:
    if ins.is_ld_imm64:
        return signed(ins.imm, 32)
    if ins.is_call:
        return ins.imm
    return ins.jump_offset()


@dataclass
class Code:
    """A program as a list of instructions with index-based references.

    ``targets[i]`` is the index of the instruction that instruction ``i`` jumps to / calls / takes the address
    of. ``funcs`` maps each function's first instruction index to its BTF FUNC type id (0 if none), ``lines``
    each line record to the index of its instruction.
    """

    insns: list[Insn]
    targets: dict[int, int] = field(default_factory=dict)
    funcs: dict[int, int] = field(default_factory=dict)
    lines: list[tuple[int, LineInfo]] = field(default_factory=list)

    # -- conversion ----------------------------------------------------------------------------------------
    @classmethod
    def from_program(cls, ps: ProgramSpec) -> Code:
        insns = list(ps.insns)
        for i, ins in enumerate(insns):
            if ins.dst > 10 or ins.src > 10:
                raise RewriteError(f"{ps.name}: instruction {i} names a register above r10")
        offs = slot_offsets(insns)
        index_of = {o: i for i, o in enumerate(offs)}
        targets: dict[int, int] = {}
        funcs: dict[int, int] = {0: 0}
        for i, ins in enumerate(insns):
            if not has_target(ins):
                continue
            t = offs[i] + _rel(ins) + 1
            if t not in index_of:
                raise RewriteError(f"{ps.name}: instruction {i} refers to slot {t}, not an instruction start")
            targets[i] = index_of[t]
            if not ins.is_jump:
                funcs.setdefault(index_of[t], 0)
        for fi in ps.func_infos:
            if fi.insn_off not in index_of:
                raise RewriteError(f"{ps.name}: func_info at slot {fi.insn_off} is not an instruction start")
            funcs[index_of[fi.insn_off]] = fi.type_id
        lines = []
        for li in ps.line_infos:
            if li.insn_off in index_of:
                lines.append((index_of[li.insn_off], li))
        return cls(insns, targets, dict(sorted(funcs.items())), lines)

    def to_program(self, template: ProgramSpec) -> ProgramSpec:
        """A copy of ``template`` carrying this code (offsets recomputed from indices)."""
        offs = slot_offsets(self.insns)
        out: list[Insn] = list(self.insns)
        for i, t in self.targets.items():
            ins = out[i]
            delta = offs[t] - offs[i] - 1
            if ins.is_ld_imm64:
                if ins.imm != delta & MASK32:
                    out[i] = Insn(ins.code, ins.dst, ins.src, ins.off, delta & MASK32, ins.ref, ins.sym)
            elif ins.is_call:
                if ins.imm != delta:
                    out[i] = Insn(ins.code, ins.dst, ins.src, ins.off, delta, ins.ref, ins.sym)
            elif ins.is_gotol:
                if ins.imm != delta:
                    out[i] = Insn(ins.code, ins.dst, ins.src, ins.off, delta, ins.ref, ins.sym)
            else:
                if not fits_signed(delta, 16):
                    raise RewriteError(f"instruction {i}: jump offset {delta} does not fit 16 bits")
                if ins.off != delta:
                    out[i] = Insn(ins.code, ins.dst, ins.src, delta, ins.imm, ins.ref, ins.sym)
        had_fi = bool(template.func_infos)
        func_infos = [FuncInfo(offs[i], t) for i, t in sorted(self.funcs.items())] if had_fi else []
        line_infos = [li if li.insn_off == offs[i] else LineInfo(offs[i], li.file_name_off, li.line_off, li.line,
                                                                 li.col) for i, li in self.lines]
        return replace(template, insns=out, func_infos=func_infos, line_infos=line_infos)

    def copy(self) -> Code:
        return Code(list(self.insns), dict(self.targets), dict(self.funcs), list(self.lines))

    # -- queries ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.insns)

    def slots(self) -> int:
        return count_slots(self.insns)

    def func_bounds(self) -> list[tuple[int, int]]:
        """(first, end) instruction index range of every function, in order."""
        starts = sorted(self.funcs)
        return [(s, starts[k + 1] if k + 1 < len(starts) else len(self.insns)) for k, s in enumerate(starts)]

    # -- editing ---------------------------------------------------------------------------------------
    def edit(
        self,
        delete: set[int] | frozenset[int] = frozenset(),
        replace_with: dict[int, Insn] | None = None,
        retarget: dict[int, int] | None = None,
    ) -> Code:
        """A new ``Code`` with ``delete``d instructions gone and ``replace_with`` applied.

        A replacement that refers to an instruction keeps the old target unless ``retarget`` gives a new one
        (an old index); a replacement that no longer refers to anything drops its target. References to a
        deleted instruction move to the next surviving one, within the same function.
        """
        replace_with = replace_with or {}
        retarget = retarget or {}
        n = len(self.insns)
        for i in delete:
            if i in replace_with:
                raise RewriteError(f"instruction {i} both deleted and replaced")
        # next survivor at or after each index, and the new index of every survivor
        nxt = list(range(n + 1))
        for i in sorted(delete, reverse=True):
            nxt[i] = nxt[i + 1]
        new_index = [0] * (n + 1)
        k = 0
        dels = sorted(delete)
        prev = 0
        for d in dels + [n]:
            new_index[prev:d] = range(k, k + d - prev)
            k += d - prev
            prev = d + 1
        func_of = [0] * n
        for fs, fe in self.func_bounds():
            func_of[fs:fe] = [fs] * (fe - fs)

        def moved(i: int) -> int:
            j = nxt[i]
            if j >= n or func_of[j] != func_of[i]:
                raise RewriteError(f"instruction {i} is referenced but everything after it in its function "
                                   "was deleted")
            return new_index[j]

        # a deleted instruction's label moves to the next survivor (the first label of a deleted run wins)
        carry: dict[int, str] = {}
        for i in dels:
            sym = self.insns[i].sym
            if sym and nxt[i] < n:
                carry.setdefault(nxt[i], sym)
        insns = list(self.insns)
        for i, new in replace_with.items():
            if new.sym is None and (carry.get(i) or insns[i].sym):
                new = replace(new, sym=carry.get(i) or insns[i].sym)
            insns[i] = new
        for j, sym in carry.items():
            if j not in replace_with and insns[j].sym is None:
                insns[j] = replace(insns[j], sym=sym)
        targets: dict[int, int] = {}
        old_targets = self.targets
        for i, t in old_targets.items():
            if i in delete or i in replace_with:
                continue
            targets[new_index[i]] = moved(retarget.get(i, t))
        for i, new in replace_with.items():
            if has_target(new):
                target = retarget.get(i, old_targets.get(i))
                if target is None:
                    raise RewriteError(f"replacement at {i} refers to an instruction but has no target")
                targets[new_index[i]] = moved(target)
        if delete:
            insns = [ins for i, ins in enumerate(insns) if i not in delete]
        funcs = {}
        for s, tid in self.funcs.items():
            ns = moved(s)
            funcs[ns] = tid
        lines: list[tuple[int, LineInfo]] = []
        seen: set[int] = set()
        has_line = {j for j, _ in self.lines}
        for i, li in self.lines:
            if nxt[i] >= n or func_of[nxt[i]] != func_of[i]:
                continue
            ni = new_index[nxt[i]]
            if ni in seen:
                continue
            if i in delete and nxt[i] in has_line:
                continue  # the survivor has its own record
            seen.add(ni)
            lines.append((ni, li))
        lines.sort(key=lambda p: p[0])
        return Code(insns, targets, dict(sorted(funcs.items())), lines)
