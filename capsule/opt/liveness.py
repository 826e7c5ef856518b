"""Liveness of registers (every function) and of stack bytes (functions whose frame never escapes).

Register liveness is the classic backward data flow over the CFG; a BPF-to-BPF call reads the arguments its
callee actually reads (callees are solved first), an ``exit`` reads ``r0``. ``r10`` is always live.

Stack liveness answers "is this store to the stack ever read?". It is only computed for a function whose
frame is reached solely through ``r10`` used directly as the base of a load or store: once ``r10`` is copied
into another register the address may be passed to a helper, a callee or spilled, and this analysis gives up
on that function (``stack_tracked`` is False) rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsule.bpf.opcodes import CallKind, Class, Mode

from .cfg import CFG
from .effects import ARGS, effect, mem_size, reg_mask

__all__ = ["Liveness", "liveness", "StackLiveness", "stack_liveness"]

FP = 10
_ALWAYS = reg_mask(FP)


@dataclass
class Liveness:
    live_out: list[int]  # registers live after each instruction
    live_in: list[int]  # registers live before each instruction
    func_live_in: dict[int, int]  # function start -> registers live at entry

    def dead_after(self, i: int, reg: int) -> bool:
        return not self.live_out[i] & (1 << reg)


def _uses(cfg: CFG, i: int, func_live_in: dict[int, int]) -> tuple[int, int]:  # noqa: ARG001
    ins = cfg.code.insns[i]
    e = effect(ins)
    uses = e.uses
    if ins.is_call and ins.src == CallKind.BPF:
        # all five: a global callee's arguments are checked against its BTF prototype at the call, so even
        # ones it never reads must stay initialised
        uses = ARGS
    return uses, e.defs


def liveness(cfg: CFG) -> Liveness:
    n = len(cfg.code.insns)
    live_out = [0] * n
    live_in = [0] * n
    func_live_in: dict[int, int] = {}
    for fstart in cfg.callee_order():
        fn = cfg.functions[fstart]
        ue: dict[int, tuple[int, int]] = {i: _uses(cfg, i, func_live_in) for i in range(fn.start, fn.end)}
        block_in: dict[int, int] = {b: 0 for b in fn.blocks}
        changed = True
        order = list(fn.blocks)[::-1]
        while changed:
            changed = False
            for bs in order:
                b = fn.blocks[bs]
                live = 0
                for s in b.succs:
                    live |= block_in[s]
                for i in range(b.end - 1, b.start - 1, -1):
                    live_out[i] = live | _ALWAYS
                    u, d = ue[i]
                    live = (live & ~d) | u
                    live_in[i] = live | _ALWAYS
                if live != block_in[bs]:
                    block_in[bs] = live
                    changed = True
        func_live_in[fstart] = block_in[fn.start]
    return Liveness(live_out, live_in, func_live_in)


@dataclass
class StackLiveness:
    stack_tracked: dict[int, bool]  # function start -> whether its frame is tracked
    live_out: list[int]  # per instruction: bit k set = byte (fp - 512 + k) may be read later

    def store_dead(self, cfg: CFG, i: int) -> bool:
        """Whether the store at ``i`` (through r10) writes only bytes nobody reads afterwards."""
        ins = cfg.code.insns[i]
        if not self.stack_tracked.get(cfg.func_of[i], False):
            return False
        m = _stack_bytes(ins.off, mem_size(ins))
        return m is not None and not (self.live_out[i] & m)


_ALL = (1 << 512) - 1


def _stack_bytes(off: int, size: int) -> int | None:
    lo = 512 + off
    if lo < 0 or lo + size > 512:
        return None
    return ((1 << size) - 1) << lo


def _frame_escapes(cfg: CFG, fstart: int) -> bool:
    fn = cfg.functions[fstart]
    for i in range(fn.start, fn.end):
        ins = cfg.code.insns[i]
        cls = ins.cls
        if cls == Class.LDX and ins.src == FP:
            continue
        if cls in (Class.ST, Class.STX) and ins.dst == FP and (ins.code & 0xE0) == Mode.MEM:
            if cls == Class.STX and ins.src == FP:
                return True
            continue
        if effect(ins).uses & (1 << FP):
            return True
    return False


def stack_liveness(cfg: CFG) -> StackLiveness:
    n = len(cfg.code.insns)
    live_out = [_ALL] * n
    tracked: dict[int, bool] = {}
    for fstart, fn in cfg.functions.items():
        ok = not _frame_escapes(cfg, fstart)
        tracked[fstart] = ok
        if not ok:
            continue
        block_in = {b: 0 for b in fn.blocks}
        changed = True
        order = list(fn.blocks)[::-1]
        while changed:
            changed = False
            for bs in order:
                b = fn.blocks[bs]
                live = 0
                for s in b.succs:
                    live |= block_in[s]
                for i in range(b.end - 1, b.start - 1, -1):
                    live_out[i] = live
                    ins = cfg.code.insns[i]
                    if ins.cls == Class.LDX and ins.src == FP:
                        m = _stack_bytes(ins.off, mem_size(ins))
                        live |= _ALL if m is None else m
                    elif ins.cls in (Class.ST, Class.STX) and ins.dst == FP:
                        m = _stack_bytes(ins.off, mem_size(ins))
                        if m is not None:
                            live &= ~m
                if live != block_in[bs]:
                    block_in[bs] = live
                    changed = True
    return StackLiveness(tracked, live_out)
