"""Liveness of registers (every function) and of stack bytes (functions whose frame never escapes).

Register liveness is the classic backward data flow over the CFG; a BPF-to-BPF call reads the arguments its
callee actually reads (callees are solved first), an ``exit`` reads ``r0``. ``r10`` is always live.

Stack liveness answers "is this store to the stack ever read?". Given the value analysis, every load, store
and call is placed by the pointers it uses: a register known to hold ``fp + off`` reads or writes exactly
those bytes, a call may read every byte from each stack pointer argument up to the top of the frame (sizes
are not modelled), and an access through a register that may be a stack pointer of unknown offset reads
everything. Without it, only a function whose frame is reached solely through ``r10`` used directly as the
base of a load or store is tracked (``stack_tracked`` False for the others).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CLASS_MASK, FP, LD_IMM64, MEM_SIZE, MODE_MASK, SIZE_MASK, CallKind, Class, Mode
from capsule.bpf.uapi import Helper

from .cfg import CFG, Block, Function
from .effects import ARGS, CALL, HELPER_ARGS, Effect, effects, mem_size, reg_mask
from .values import Kind, Values

__all__ = ["Liveness", "liveness", "StackLiveness", "stack_liveness", "faint", "pure"]

_ALWAYS = reg_mask(FP)


@dataclass
class Liveness:
    live_out: list[int]  # registers live after each instruction
    live_in: list[int]  # registers live before each instruction
    func_live_in: dict[int, int]  # function start -> registers live at entry

    def dead_after(self, i: int, reg: int) -> bool:
        return not self.live_out[i] & (1 << reg)


def _reg_uses(cfg: CFG, effs: list[Effect]) -> list[int]:
    uses = [e.uses for e in effs]
    for i, ins in enumerate(cfg.code.insns):
        if ins.code == CALL and ins.src == CallKind.BPF:
            # all five: a global callee's arguments are checked against its BTF prototype at the call, so
            # even ones it never reads must stay initialised
            uses[i] = ARGS
    return uses


def pure(ins: Insn) -> bool:
    """Whether ``ins`` only computes a register (ALU, ``ld_imm64``, a plain or sign-extending load): removable
    when that register is never read. ``ld_abs``/``ld_ind`` are not: they may end the program."""
    return ins.code in _PURE


_PURE = frozenset(c for c in range(256) if c & CLASS_MASK in (Class.ALU, Class.ALU64) or c == LD_IMM64 or (
    c & CLASS_MASK == Class.LDX and c & MODE_MASK in (Mode.MEM, Mode.MEMSX)))


def faint(cfg: CFG, effs: list[Effect] | None = None) -> set[int]:
    """Instructions whose only effect is a register value nothing *useful* reads: liveness where a removable
    instruction whose result is dead does not make its own operands live, so a whole dead chain (``r1 = ..;
    r2 = r1 + 1`` with r2 unused) is found in one analysis instead of one link per round."""
    insns = cfg.code.insns
    effs = effs if effs is not None else effects(insns)
    uses = _reg_uses(cfg, effs)
    removable = [ins.code in _PURE and ins.dst != FP for ins in insns]
    dead: set[int] = set()
    for fstart in cfg.callee_order():
        fn = cfg.functions[fstart]
        block_dead: dict[int, list[int]] = {}

        def transfer(b: Block, live: int, block_dead: dict[int, list[int]] = block_dead) -> int:
            found = []
            for i in range(b.end - 1, b.start - 1, -1):
                d = effs[i].defs
                if removable[i] and not live & d:
                    found.append(i)
                    continue
                live = (live & ~d) | uses[i] | _ALWAYS
            block_dead[b.start] = found  # the last visit of a block is made with its final live-out
            return live

        _backward(fn, transfer)
        for found in block_dead.values():
            dead.update(found)
    return dead


def _backward(fn: Function, transfer: Callable[[Block, int], int]) -> dict[int, int]:
    """Backward data flow over ``fn``'s reachable blocks with a worklist in post-order (successors first, so
    acyclic code is walked once): ``transfer(block, live_out) -> live_in``; returns live-in per block."""
    order = fn.rpo()[::-1]
    rank = {b: k for k, b in enumerate(order)}
    block_in = dict.fromkeys(fn.blocks, 0)
    blocks = fn.blocks
    heap = list(range(len(order)))
    queued = set(order)
    while heap:
        bs = order[heapq.heappop(heap)]
        queued.discard(bs)
        b = blocks[bs]
        live = 0
        for s in b.succs:
            live |= block_in[s]
        new = transfer(b, live)
        if new != block_in[bs]:
            block_in[bs] = new
            for p in b.preds:
                if p in rank and p not in queued:
                    queued.add(p)
                    heapq.heappush(heap, rank[p])
    return block_in


# The blocks of the last register liveness, for the next one (edits are local: most blocks come back with the
# same instructions and the same registers live after them). By the ``id`` of a block's first instruction; an
# entry keeps the block's instructions alive, so the id always names the instruction it was taken of.
_Blk = tuple[list[Insn], int, int, int, list[int], list[int]]  # insns, gen, keep, live after, live_out, live_in
_blk_memo: dict[int, _Blk] = {}


def forget() -> None:
    """Drop the remembered blocks (and the instructions they keep alive)."""
    _blk_memo.clear()


def liveness(cfg: CFG, effs: list[Effect] | None = None) -> Liveness:
    global _blk_memo
    insns = cfg.code.insns
    n = len(insns)
    effs = effs if effs is not None else effects(insns)
    uses = _reg_uses(cfg, effs)
    defs = [~e.defs for e in effs]
    live_out = [0] * n
    live_in = [0] * n
    func_live_in: dict[int, int] = {}
    prev, memo = _blk_memo, {}
    for fstart in cfg.callee_order():
        fn = cfg.functions[fstart]
        # a block's transfer function (live_in = gen | (live_out & ~kill)), computed once
        gen_kill: dict[int, tuple[int, int]] = {}
        same: dict[int, _Blk] = {}  # blocks met before, with the same instructions (and uses: a call's are fixed)
        for bs, b in fn.blocks.items():
            hit = prev.get(id(insns[bs]))
            if hit is not None and hit[0] == insns[bs:b.end]:
                same[bs] = hit
                gen_kill[bs] = (hit[1], hit[2])
                continue
            gen, keep = 0, -1
            for i in range(b.end - 1, b.start - 1, -1):
                gen = (gen & defs[i]) | uses[i]
                keep &= defs[i]
            gen_kill[bs] = (gen, keep)
        block_in: dict[int, int] = {b: 0 for b in fn.blocks}
        order = list(fn.blocks)[::-1]
        changed = True
        while changed:
            changed = False
            for bs in order:
                live = 0
                for s in fn.blocks[bs].succs:
                    live |= block_in[s]
                gen, keep = gen_kill[bs]
                live = (live & keep) | gen
                if live != block_in[bs]:
                    block_in[bs] = live
                    changed = True
        for bs, b in fn.blocks.items():
            live = 0
            for s in b.succs:
                live |= block_in[s]
            start, end = b.start, b.end
            hit = same.get(bs)
            if hit is not None and hit[3] == live:
                live_out[start:end] = hit[4]
                live_in[start:end] = hit[5]
                memo[id(insns[start])] = hit
                continue
            after = live
            for i in range(end - 1, start - 1, -1):
                live_out[i] = live | _ALWAYS
                live = (live & defs[i]) | uses[i]
                live_in[i] = live | _ALWAYS
            gen, keep = gen_kill[bs]
            memo[id(insns[start])] = (insns[start:end], gen, keep, after, live_out[start:end], live_in[start:end])
        func_live_in[fstart] = block_in[fn.start]
    _blk_memo = memo
    return Liveness(live_out, live_in, func_live_in)


@dataclass
class StackLiveness:
    stack_tracked: dict[int, bool]  # function start -> whether its frame is tracked
    live_out: list[int]  # per instruction: bit k set = byte (fp - 512 + k) may be read later
    store_at: dict[int, int] | None = None  # store index -> bytes it writes (stores the value analysis placed)

    def store_dead(self, cfg: CFG, i: int) -> bool:
        """Whether the store at ``i`` writes only stack bytes nobody reads afterwards."""
        if not self.stack_tracked.get(cfg.func_of[i], False):
            return False
        if self.store_at is not None:
            m = self.store_at.get(i)
        else:
            ins = cfg.code.insns[i]
            m = _stack_bytes(ins.off, mem_size(ins)) if ins.dst == FP else None
        return m is not None and not (self.live_out[i] & m)


_ALL = (1 << 512) - 1
_STACK, _TOP = Kind.STACK, Kind.TOP
_ATOMIC = int(Mode.ATOMIC)
_LDX, _ST, _STX = int(Class.LDX), int(Class.ST), int(Class.STX)
# helpers that only touch the memory their pointer arguments point at (bpf_loop runs a callback; the printk
# family may follow pointers stored in their data array: not listed)
_PLAIN_HELPERS = frozenset(HELPER_ARGS) - {Helper.TRACE_PRINTK, Helper.SNPRINTF, Helper.LOOP}


def _stack_bytes(off: int, size: int) -> int | None:
    lo = 512 + off
    if lo < 0 or lo + size > 512:
        return None
    return ((1 << size) - 1) << lo


def _above(off: int | None) -> int:
    """Every byte from ``fp + off`` to the top of the frame (what a helper given that pointer may read)."""
    if off is None or off <= -512:
        return _ALL
    if off >= 0:
        return 0
    return _ALL & ~((1 << (512 + off)) - 1)


def stack_liveness(cfg: CFG, effs: list[Effect] | None = None, values: Values | None = None) -> StackLiveness:
    """Backward liveness of stack bytes. With ``values`` every access is placed by the value analysis (any
    register holding a stack pointer of known offset, helpers reading from their pointer arguments upwards);
    without, only functions that use ``r10`` solely as a load/store base are tracked."""
    if values is None:
        return _stack_liveness_fp(cfg, effs if effs is not None else effects(cfg.code.insns))
    insns = cfg.code.insns
    n = len(insns)
    live_out = [_ALL] * n
    tracked: dict[int, bool] = {}
    store_at: dict[int, int] = {}
    before = values.before
    codes = [ins.code for ins in insns]
    for fstart, fn in cfg.functions.items():
        tracked[fstart] = True
        if not any(c & CLASS_MASK == _ST or c & CLASS_MASK == _STX for c in codes[fn.start:fn.end]):
            continue  # no store to judge
        size = fn.end - fn.start
        gen = [0] * size
        kill = [0] * size
        for i in range(fn.start, fn.end):
            st = before[i]
            if st is None:
                continue
            c = codes[i]
            cls = c & CLASS_MASK
            if cls == _LDX or (cls == _STX and c & MODE_MASK == _ATOMIC):  # loads, atomics read
                ins = insns[i]
                v = st[0][ins.src if cls == 1 else ins.dst]
                vk = v[0]
                if vk is _STACK:
                    off = v.const_offset
                    m = _stack_bytes(off + ins.off, MEM_SIZE[c & SIZE_MASK]) if off is not None else None
                    gen[i - fn.start] = _ALL if m is None else m
                elif vk is _TOP:
                    gen[i - fn.start] = _ALL
            elif cls == 2 or cls == 3:  # plain stores
                ins = insns[i]
                v = st[0][ins.dst]
                if v[0] is _STACK:
                    off = v.const_offset
                    if off is not None:
                        m = _stack_bytes(off + ins.off, MEM_SIZE[c & SIZE_MASK])
                        if m is not None:
                            kill[i - fn.start] = m
                            store_at[i] = m
            elif c == CALL:  # a call reads what its pointer arguments reach
                ins = insns[i]
                regs = st[0]
                known = ins.src == CallKind.HELPER and ins.imm in _PLAIN_HELPERS
                g = 0
                for r in range(1, (HELPER_ARGS[ins.imm] if known else 5) + 1):
                    v = regs[r]
                    vk = v[0]
                    if vk is _STACK and known:
                        g |= _above(v.const_offset)
                    elif vk is _STACK or vk is _TOP:
                        # a subprogram, kfunc or callback may follow pointers kept in the frame, anywhere
                        g = _ALL
                        break
                gen[i - fn.start] = g
        # per block, only the instructions that read or write stack bytes matter (live-out is recorded at
        # those; elsewhere it stays "everything", which no query asks about)
        events: dict[int, list[tuple[int, int, int]]] = {}
        for bs, b in fn.blocks.items():
            events[bs] = [(i, ~kill[i - fn.start], gen[i - fn.start]) for i in range(b.end - 1, b.start - 1, -1)
                          if kill[i - fn.start] or gen[i - fn.start]]

        def transfer(b: Block, live: int, events: dict[int, list[tuple[int, int, int]]] = events) -> int:
            for i, keep, g in events[b.start]:
                live_out[i] = live
                live = (live & keep) | g
            return live

        _backward(fn, transfer)
    return StackLiveness(tracked, live_out, store_at)


def _frame_escapes(cfg: CFG, fstart: int, effs: list[Effect]) -> bool:
    fn = cfg.functions[fstart]
    insns = cfg.code.insns
    for i in range(fn.start, fn.end):
        ins = insns[i]
        cls = ins.code & CLASS_MASK
        if cls == Class.LDX and ins.src == FP:
            continue
        if cls in (Class.ST, Class.STX) and ins.dst == FP and (ins.code & MODE_MASK) == Mode.MEM:
            if cls == Class.STX and ins.src == FP:
                return True
            continue
        if effs[i].uses & (1 << FP):
            return True
    return False


def _stack_liveness_fp(cfg: CFG, effs: list[Effect]) -> StackLiveness:
    insns = cfg.code.insns
    n = len(insns)
    live_out = [_ALL] * n
    tracked: dict[int, bool] = {}
    for fstart, fn in cfg.functions.items():
        ok = not _frame_escapes(cfg, fstart, effs)
        tracked[fstart] = ok
        if not ok:
            continue
        # per instruction: bytes it reads (gen) and bytes it overwrites (kill)
        gen = [0] * (fn.end - fn.start)
        kill = [0] * (fn.end - fn.start)
        for i in range(fn.start, fn.end):
            ins = insns[i]
            cls = ins.code & CLASS_MASK
            if cls == 1 and ins.src == FP:
                m = _stack_bytes(ins.off, mem_size(ins))
                gen[i - fn.start] = _ALL if m is None else m
            elif (cls == 2 or cls == 3) and ins.dst == FP:
                m = _stack_bytes(ins.off, mem_size(ins))
                if ins.code & MODE_MASK == Mode.ATOMIC:  # reads the old value
                    gen[i - fn.start] = _ALL if m is None else m
                elif m is not None:
                    kill[i - fn.start] = m
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
                    k = i - fn.start
                    live = (live & ~kill[k]) | gen[k]
                if live != block_in[bs]:
                    block_in[bs] = live
                    changed = True
    return StackLiveness(tracked, live_out)
