"""Value analysis: what each register holds before each instruction, as far as the bytecode tells.

A value is a scalar with known bits (``Tnum``; a constant has no unknown bits) or a pointer of a kind the
verifier distinguishes (context, packet, packet end, packet meta, map, map value, stack, arena, other) with
its offset from the start of the object as known bits, which also gives its alignment. ``TOP`` is "anything".
The analysis is a forward data flow per function; joins only lose information, so it terminates.

Where pointers come from: ``r1`` at a program's entry is the context and ``r10`` the frame; fields of the
context give packet pointers (XDP ``data``/``data_end``/``data_meta``; ``__sk_buff`` ``data``/``data_end``/
``data_meta`` for skb programs); ``ld_imm64`` of a map or of global data; ``bpf_map_lookup_elem`` (and the
per-cpu lookup) returns a map value; ``addr_space_cast`` to address space 0 makes an arena pointer. 8-byte
register spills to fixed stack slots are followed through the stack, across calls too when no argument of the
call can point at the slot (a helper or callee only writes the caller's stack through a pointer argument).

Speed matters here (the analysis is recomputed after every batch of edits): values, known bits and states are
tuples, a block's state is updated in place and snapshotted per instruction, and blocks are visited in
reverse post-order from a heap.
"""

from __future__ import annotations

import heapq
from enum import Enum
from typing import NamedTuple

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import (
    CALL,
    CLASS_MASK,
    LD_IMM64,
    MEM_SIZE,
    MODE_MASK,
    OP_MASK,
    SIZE_MASK,
    SRC_MASK,
    Alu,
    Atomic,
    CallKind,
    Class,
    Mode,
    Pseudo,
    Size,
)
from capsule.bpf.uapi import ProgType
from capsule.ints import MASK32, MASK64, signed

from .cfg import CFG, Function
from .helpers import HELPER_WRITES, RETURNS_MAP_VALUE
from .semantics import alu_result, imm64
from .tnum import UNKNOWN, Tnum

__all__ = ["Kind", "Val", "State", "Values", "analyze_values", "TOP", "access_val"]

_new = tuple.__new__


class Kind(Enum):
    TOP = "top"
    SCALAR = "scalar"
    CTX = "ctx"
    PKT = "packet"
    PKT_END = "packet_end"
    PKT_META = "packet_meta"
    MAP_PTR = "map"
    MAP_VALUE = "map_value"
    STACK = "stack"
    ARENA = "arena"
    PTR = "pointer"  # some other kernel pointer (ringbuf memory, BTF object, function)
    NONSTACK = "nonstack"  # anything, except a pointer into this function's stack frame


# the members as module constants: attribute lookups on an Enum class are slow, and these are compared in
# every step of the analysis
K_TOP, K_SCALAR, K_CTX, K_PKT = Kind.TOP, Kind.SCALAR, Kind.CTX, Kind.PKT
K_PKT_END, K_PKT_META, K_MAP_PTR, K_MAP_VALUE = Kind.PKT_END, Kind.PKT_META, Kind.MAP_PTR, Kind.MAP_VALUE
K_STACK, K_ARENA, K_PTR, K_NONSTACK = Kind.STACK, Kind.ARENA, Kind.PTR, Kind.NONSTACK
_NOT_POINTER = (K_TOP, K_SCALAR, K_NONSTACK)


class Val(NamedTuple):
    kind: Kind
    tn: Tnum = UNKNOWN  # scalar bits, or pointer offset from the object's start
    ref: str | None = None  # map name for MAP_PTR / MAP_VALUE

    @staticmethod
    def const(v: int) -> Val:
        return _const(v & MASK64)

    @staticmethod
    def scalar(tn: Tnum | None = None) -> Val:
        return _new(Val, (K_SCALAR, tn or UNKNOWN, None))

    @property
    def is_const(self) -> bool:
        return self[0] is K_SCALAR and self[1][1] == 0

    @property
    def is_pointer(self) -> bool:
        return self[0] not in _NOT_POINTER

    @property
    def const_offset(self) -> int | None:
        """A pointer's exact offset (signed), when known."""
        if self[0] in _NOT_POINTER or self[1][1]:
            return None
        return signed(self[1][0])

    def join(self, o: Val) -> Val:
        if self == o:
            return self
        k = self[0]
        if k is not o[0] or self[2] != o[2] or k is K_TOP or k is K_NONSTACK:
            # different kinds: the stack pointer is the one fact worth keeping apart (spills, dead stores)
            if k is K_TOP or o[0] is K_TOP or k is K_STACK or o[0] is K_STACK:
                return TOP
            return NONSTACK
        return _new(Val, (k, self[1].join(o[1]), self[2]))


TOP = Val(K_TOP)
NONSTACK = Val(K_NONSTACK)
_UNINIT = TOP
SCALAR = Val(K_SCALAR, UNKNOWN)
_RANGE = {bits: Val(K_SCALAR, Tnum.range_bits(bits)) for bits in (8, 16, 32)}
_CONSTS: dict[int, Val] = {}


def _const(v: int) -> Val:
    c = _CONSTS.get(v)
    if c is None:
        if len(_CONSTS) > 100_000:
            _CONSTS.clear()
        c = _CONSTS[v] = _new(Val, (K_SCALAR, _new(Tnum, (v, 0)), None))
    return c


# context fields that hold packet pointers: prog type -> {offset: kind}
_XDP = {0: K_PKT, 4: K_PKT_END, 8: K_PKT_META}
_SKB = {76: K_PKT, 80: K_PKT_END, 140: K_PKT_META}
_P = ProgType
CTX_POINTERS: dict[int, dict[int, Kind]] = {
    _P.XDP: _XDP, _P.SCHED_CLS: _SKB, _P.SCHED_ACT: _SKB, _P.CGROUP_SKB: _SKB, _P.LWT_IN: _SKB, _P.LWT_OUT: _SKB,
    _P.LWT_XMIT: _SKB,
}
_NO_CTX: dict[int, Kind] = {}
_NO_VALUE = frozenset(c for c in range(256) if c & CLASS_MASK in (Class.JMP, Class.JMP32) and c != CALL)  # jumps, exit
# plain ints for the transfer functions, which test every instruction (no enum attribute lookups per step)
_ALU, _ALU64, _LD, _LDX, _ST, _STX = (int(c) for c in (Class.ALU, Class.ALU64, Class.LD, Class.LDX, Class.ST,
                                                      Class.STX))
_ADD, _SUB, _OR, _AND, _LSH, _RSH, _NEG, _XOR, _MOV, _END = (
    int(a) for a in (Alu.ADD, Alu.SUB, Alu.OR, Alu.AND, Alu.LSH, Alu.RSH, Alu.NEG, Alu.XOR, Alu.MOV, Alu.END))
_MEM, _MEMSX, _ATOMIC = int(Mode.MEM), int(Mode.MEMSX), int(Mode.ATOMIC)
_DW = int(Size.DW)
_MOV64_K = int(Class.ALU64 | Alu.MOV)
_MOV64_X = _MOV64_K | SRC_MASK
_ATOMIC_FETCH, _CMPXCHG = int(Atomic.FETCH), int(Atomic.CMPXCHG)
_BPF_CALL = int(CallKind.BPF)
_MODE_CLASS = MODE_MASK | CLASS_MASK
_ST_MEM, _STX_MEM = _ST | _MEM, _STX | _MEM


class State(NamedTuple):
    regs: tuple[Val, ...]
    spills: dict[int, Val] = {}  # fp offset of an 8-byte slot -> value (never mutated once in a State)

    def join(self, o: State) -> State:
        if self[0] == o[0]:
            regs = self[0]
        else:
            regs = tuple([a if a is b or a == b else a.join(b) for a, b in zip(self[0], o[0], strict=False)])
        sp, osp = self[1], o[1]
        if sp is osp or sp == osp:
            return _new(State, (regs, sp))
        # the slots both sides hold, joined (no set operations on items: hashing a Val hashes an Enum, which
        # runs Python code); a spill is never TOP, so equal slots are kept
        spills = {}
        get = osp.get
        for k, v in sp.items():
            w = get(k)
            if w is not None:
                j = v if v == w else v.join(w)
                if j is not TOP:
                    spills[k] = j
        return _new(State, (regs, spills))


class Values:
    """Per instruction, the state before it runs (None for unreachable code)."""

    def __init__(self, before: list[State | None]) -> None:
        self.before = before

    def reg(self, i: int, r: int) -> Val:
        s = self.before[i]
        return TOP if s is None else s[0][r]

    def reachable(self, i: int) -> bool:
        return self.before[i] is not None


def _mem_access(st: State, base: int, off: int) -> Val:
    v = st[0][base]
    if v[0] in _NOT_POINTER:
        return v
    return _new(Val, (v[0], v[1].add(_new(Tnum, (off & MASK64, 0))), v[2]))


def access_val(values: Values, i: int, base: int, off: int) -> Val:
    """The pointer (kind, offset) that instruction ``i`` accesses through ``base + off``."""
    s = values.before[i]
    return TOP if s is None else _mem_access(s, base, off)


# -- transfer functions ---------------------------------------------------------------------------------------
def _alu(ins: Insn, regs: list[Val]) -> Val:
    c = ins.code
    w32 = c & CLASS_MASK == _ALU
    op = c & OP_MASK
    x = c & SRC_MASK
    if op == _MOV and not ins.off:  # mov
        if not x:
            return _const(ins.imm & MASK32 if w32 else imm64(ins.imm))
        s = regs[ins.src]
        if not w32:
            return s
        if s[0] is K_SCALAR:
            return _new(Val, (K_SCALAR, s[1].trunc32(), None)) if s[1][1] else _const(s[1][0] & MASK32)
        return _RANGE[32]
    if op == _MOV:
        if ins.off == 1 and x and not w32:  # addr_space_cast
            if ins.imm >> 16 == 0:  # to the kernel address space: an arena pointer the program may dereference
                return _new(Val, (K_ARENA, UNKNOWN, None))
            return SCALAR
        s = regs[ins.src] if x else TOP  # movsx
        if s[0] is K_SCALAR and not s[1][1]:
            r = alu_result(ins, 0, s[1][0])
            if r is not None:
                return _const(r)
        return _RANGE[32] if w32 else SCALAR
    d = regs[ins.dst]
    if x:
        s = regs[ins.src]
    else:
        s = _const(ins.imm & MASK32 if w32 else imm64(ins.imm))  # sign-extended, as 64-bit operations see it
    dk = d[0]
    if dk is K_SCALAR and (s[0] is K_SCALAR or op in (_NEG, _END)):
        if not d[1][1] and (not s[1][1] or op in (_NEG, _END)):
            r = alu_result(ins, d[1][0], s[1][0])
            if r is not None:
                return _const(r)
        return _new(Val, (K_SCALAR, _alu_bits(ins, d[1], s[1], w32), None))
    if not w32 and op in (_ADD, _SUB) and not ins.off:
        sk = s[0]
        if dk not in _NOT_POINTER and sk is K_SCALAR:
            return _new(Val, (dk, d[1].add(s[1]) if op == _ADD else d[1].sub(s[1]), d[2]))
        if op == _ADD and sk not in _NOT_POINTER and dk is K_SCALAR:
            return _new(Val, (sk, s[1].add(d[1]), s[2]))
        if op == _SUB and dk not in _NOT_POINTER and sk not in _NOT_POINTER:
            return SCALAR
    if w32:
        return _RANGE[32]
    if dk is K_TOP or s[0] is K_TOP or dk is K_STACK or s[0] is K_STACK:
        return TOP  # (a stack pointer plus something unknown is still a stack pointer)
    # pointer arithmetic keeps the pointer's object; without a stack pointer in, there is none out
    return NONSTACK if dk is K_NONSTACK or s[0] is K_NONSTACK else SCALAR


def _alu_bits(ins: Insn, a: Tnum, b: Tnum, w32: bool) -> Tnum:
    op = ins.code & OP_MASK
    if w32:
        a, b = a.trunc32(), b.trunc32()
    r: Tnum
    if ins.off and op != _MOV:
        r = UNKNOWN
    elif op == _ADD:
        r = a.add(b)
    elif op == _SUB:
        r = a.sub(b)
    elif op == _AND:
        r = a.and_(b)
    elif op == _OR:
        r = a.or_(b)
    elif op == _XOR:
        r = a.xor(b)
    elif op == _LSH and not b[1]:
        r = a.lsh(b[0] & (31 if w32 else 63))
    elif op == _RSH and not b[1]:
        r = a.rsh(b[0] & (31 if w32 else 63))
    elif op == _END and ins.imm in (16, 32) and not (ins.code & SRC_MASK) and ins.code & CLASS_MASK == _ALU:
        # le16/le32 (to little endian, which this machine is): a truncation
        m = (1 << ins.imm) - 1
        r = _new(Tnum, (a[0] & m, a[1] & m))
    elif op == _END and ins.imm in (16, 32):
        r = Tnum.range_bits(ins.imm)
    else:
        r = UNKNOWN
    return r.trunc32() if w32 else r


def _exact_offset(v: Val, off: int) -> int | None:
    """``const_offset`` of ``v + off`` (``v`` a pointer), without building that pointer."""
    tn = v[1]
    if tn[1]:
        return None
    return signed(tn[0] + off)


def _load(ins: Insn, st: State, prog_type: int) -> Val:
    c = ins.code
    if c & MODE_MASK == _MEMSX:  # sign-extending load
        return SCALAR
    size = MEM_SIZE[c & SIZE_MASK]
    p = st[0][ins.src]
    pk = p[0]  # the kind of the accessed pointer is its base's (an offset changes only the offset)
    if pk is K_CTX and size == 4:
        o = _exact_offset(p, ins.off)
        if o is not None:
            kind = CTX_POINTERS.get(prog_type, _NO_CTX).get(o)
            if kind is not None:
                return _new(Val, (kind, _new(Tnum, (0, 0)), None))
    elif pk is K_STACK and size == 8:
        o = _exact_offset(p, ins.off)
        if o is not None:
            v = st[1].get(o)
            if v is not None:
                return v
    if size < 8:
        return _RANGE[size * 8]
    if pk is K_PKT or pk is K_ARENA:
        return SCALAR
    if pk is K_STACK or pk is K_TOP:
        return TOP  # a slot we do not follow may hold any spilled pointer, a stack pointer too
    # an 8-byte field elsewhere may hold a kernel pointer (ctx fields, kptrs), never a usable stack pointer:
    # the verifier only tracks stack pointers in registers and stack slots
    return NONSTACK


def _store(ins: Insn, st: State) -> dict[int, Val]:
    spills = st[1]
    p = st[0][ins.dst]
    pk = p[0]  # the kind of the accessed pointer is its base's
    lo = _exact_offset(p, ins.off) if pk is K_STACK else None
    if lo is not None:
        size = MEM_SIZE[ins.code & SIZE_MASK]
        if size == 8 and ins.code & MODE_MASK == _MEM:
            if spills:
                spills = {k: v for k, v in spills.items() if k + 8 <= lo or k >= lo + size}
            v = st[0][ins.src] if ins.code & CLASS_MASK == _STX else _const(imm64(ins.imm))
            if v is not TOP and v[0] is not K_TOP:
                spills = dict(spills)
                spills[lo] = v
            return spills
        return _misc(spills, lo, size)
    if pk is K_TOP or pk is K_STACK:
        return {}
    return spills




def _call_spills(st: State, ins: Insn) -> dict[int, Val]:
    """The spills a call leaves. A helper of ``HELPER_WRITES`` writes the caller's stack only through its
    listed pointer arguments: ``size`` bytes when the size is known, else anything at or above the pointer;
    an argument we cannot name may be a stack pointer. Other calls (kfuncs, subprograms, callbacks, helpers not
    listed, such as dynptrs writing through pointers kept in memory) keep the spills only when no argument
    may point into the stack at all."""
    spills = st[1]
    if not spills:
        return spills
    regs = st[0]
    writes = HELPER_WRITES.get(ins.imm) if ins.src == 0 else None
    if writes is None:
        for r in range(1, 6):
            k = regs[r][0]
            if k is K_TOP or k is K_STACK:
                return {}
        return spills
    for ptr, size in writes:
        v = regs[ptr]
        k = v[0]
        if k is K_TOP:
            return {}
        if k is not K_STACK:
            continue
        lo = v.const_offset
        if lo is None:
            return {}
        n: int | None = None
        if size is not None and size < 0:
            n = -size
        elif size is not None and regs[size].is_const:
            n = regs[size][1][0]
        if n is None or n > 512:
            spills = {k: w for k, w in spills.items() if k + 8 <= lo}
        else:
            spills = _misc(spills, lo, n)
    return spills


def _misc(spills: dict[int, Val], lo: int, n: int) -> dict[int, Val]:
    """The spills after bytes ``[lo, lo + n)`` of the frame receive data that is not a whole register spill
    (a narrow store, a helper's output). The verifier only follows pointers spilled with an 8-byte store to an
    aligned slot and reads any slot holding such bytes back as a scalar: every slot they touch holds a value
    that is no stack pointer."""
    out = {k: v for k, v in spills.items() if k + 8 <= lo or k >= lo + n}
    first = lo - lo % 8
    for k in range(first, lo + n, 8):
        if k + 8 <= 0:
            out[k] = NONSTACK
    return out


def step(ins: Insn, st: State, prog_type: int) -> State:
    """The state after ``ins`` (the analysis inlines the common cases of this)."""
    regs = list(st[0])
    spills = _step(ins, regs, st, prog_type)
    return _new(State, (tuple(regs), spills))


def _step(ins: Insn, regs: list[Val], st: State, prog_type: int) -> dict[int, Val]:
    """Update ``regs`` (a copy of ``st.regs``) for ``ins``; return the spills after it."""
    c = ins.code
    cls = c & CLASS_MASK
    if cls == _ALU64 or cls == _ALU:
        regs[ins.dst] = _alu(ins, regs)
    elif cls == _LDX:
        regs[ins.dst] = _load(ins, st, prog_type)
    elif cls == _ST or cls == _STX:
        if cls == _STX and c & MODE_MASK == _ATOMIC:
            imm = ins.imm
            if imm & _ATOMIC_FETCH:  # the old value comes back: in r0 for cmpxchg, else in the source
                r = 0 if imm == _CMPXCHG else ins.src
                regs[r] = SCALAR if c & SIZE_MASK == _DW else _RANGE[32]
        return _store(ins, st)
    elif c == LD_IMM64:
        src = ins.src
        if src == Pseudo.NONE:
            regs[ins.dst] = _const(ins.imm & MASK64)
        elif src == Pseudo.MAP_FD:
            regs[ins.dst] = _new(Val, (K_MAP_PTR, _new(Tnum, (0, 0)), ins.ref))
        elif src in (Pseudo.MAP_VALUE, Pseudo.MAP_IDX_VALUE):
            regs[ins.dst] = _new(Val, (K_MAP_VALUE, _new(Tnum, (ins.imm >> 32, 0)), ins.ref))
        else:
            regs[ins.dst] = _new(Val, (K_PTR, UNKNOWN, None))
    elif cls == _LD:  # ld_abs / ld_ind
        size = MEM_SIZE[c & SIZE_MASK]
        for r in range(1, 6):
            regs[r] = NONSTACK
        regs[0] = _RANGE[size * 8] if size < 8 else SCALAR
        return st[1]
    elif c == CALL:
        ret = TOP if ins.src == _BPF_CALL else NONSTACK  # helpers and kfuncs never return stack pointers
        if ins.src == CallKind.HELPER and ins.imm in RETURNS_MAP_VALUE and regs[1][0] is K_MAP_PTR:
            ret = _new(Val, (K_MAP_VALUE, _new(Tnum, (0, 0)), regs[1][2]))
        spills = _call_spills(st, ins)
        regs[0] = ret
        for r in range(1, 6):
            regs[r] = NONSTACK  # clobbered: the verifier refuses to read them
        return spills
    return st[1]


def _widen(old: State, new: State, regs_too: bool = True) -> State:
    """Jump to the top of each lattice column that is still changing (bounds the rounds at loop heads)."""
    regs = new[0]
    if regs_too:
        regs = tuple([n if o == n or n[0] is K_TOP else _new(Val, (n[0], UNKNOWN, n[2]))
                      for o, n in zip(old[0], new[0], strict=True)])
    osp = old[1]
    spills = {k: v for k, v in new[1].items() if osp.get(k) == v}
    return _new(State, (regs, spills))


# Per-function results of the last multi-function analysis, for the next one. A function's states depend only
# on its own instructions and jump structure (its entry state is fixed, calls are not followed), and an edit
# usually touches few functions of a large program: the others are not analysed again. The key holds the
# ``id`` of each instruction (edits keep the ``Insn`` objects they leave alone) and the entry keeps those
# instructions alive, so an id in a key always names the instruction it was taken of.
_FnKey = tuple[int, bool, tuple[int, ...], tuple[tuple[int, int], ...]]  # see _function_keys
_fn_memo: dict[_FnKey, tuple[list[Insn], list[State | None]]] = {}
# Likewise per block, for the functions an edit did touch: a block whose instructions and entry state are those
# of a block of the previous analysis has its states (by the ``id`` of its first instruction, which the entry
# keeps alive). Edits are local, so most blocks of a large function are met again with their old entry state.
_Blk = tuple[list[Insn], "State", list["State | None"], "State"]  # instructions, entry, states, exit state
_blk_memo: dict[int, _Blk] = {}
_blk_type = -1  # the program type ``_blk_memo`` was taken with (loads from the context depend on it)


def forget() -> None:
    """Drop the remembered per-function and per-block results (and the instructions they keep alive)."""
    _fn_memo.clear()
    _blk_memo.clear()


def _function_keys(cfg: CFG, prog_type: int) -> dict[int, _FnKey]:
    insns = cfg.code.insns
    func_of = cfg.func_of
    jumps: dict[int, list[tuple[int, int]]] = {f: [] for f in cfg.functions}
    for i, t in cfg.code.targets.items():
        f = func_of[i]
        if func_of[t] == f:  # jumps (calls and function addresses do not shape the function's states)
            jumps[f].append((i - f, t - f))
    return {f: (prog_type, f == 0, tuple(map(id, insns[f:fn.end])), tuple(sorted(jumps[f])))
            for f, fn in cfg.functions.items()}


def analyze_values(cfg: CFG, prog_type: int) -> Values:
    global _fn_memo, _blk_memo, _blk_type
    n = len(cfg.code.insns)
    before: list[State | None] = [None] * n
    insns = cfg.code.insns
    keys = _function_keys(cfg, prog_type) if len(cfg.functions) > 1 else None
    memo: dict[_FnKey, tuple[list[Insn], list[State | None]]] = {}
    blk_prev: dict[int, _Blk] = _blk_memo if _blk_type == prog_type else {}
    blk_memo: dict[int, _Blk] = {}
    for fstart, fn in cfg.functions.items():
        if keys is not None:
            key = keys[fstart]
            hit = _fn_memo.get(key)
            if hit is not None:
                memo[key] = hit
                before[fstart:fn.end] = hit[1]
                continue
        _analyze_function(fn, insns, before, prog_type, blk_prev, blk_memo)
        if keys is not None:
            memo[keys[fstart]] = (insns[fstart:fn.end], before[fstart:fn.end])
    if keys is not None:
        _fn_memo = memo
    _blk_memo, _blk_type = blk_memo, prog_type
    return Values(before)


def _analyze_function(fn: Function, insns: list[Insn], before: list[State | None], prog_type: int,
                      blk_prev: dict[int, _Blk], blk_memo: dict[int, _Blk]) -> None:
    """Fill ``before`` over ``fn``'s instructions (reusing ``blk_prev``'s blocks, recording into ``blk_memo``)."""
    fstart = fn.start
    # a subprogram's arguments may point into its caller's frame (TOP); a program's entry has only the
    # context, the other registers are uninitialised (unreadable, so never a stack pointer)
    regs0 = [TOP] * 11 if fstart else [NONSTACK] * 11
    regs0[10] = _new(Val, (K_STACK, _new(Tnum, (0, 0)), None))
    if fstart == 0:
        regs0[1] = _new(Val, (K_CTX, _new(Tnum, (0, 0)), None))
    blocks = fn.blocks
    block_in: dict[int, State] = {fstart: _new(State, (tuple(regs0), {}))}
    order = fn.rpo()
    rank = {b: k for k, b in enumerate(order)}
    visits: dict[int, int] = {}
    heap = [0]
    queued = {fstart}
    while heap:
        bs = order[heapq.heappop(heap)]
        queued.discard(bs)
        st = block_in[bs]
        b = blocks[bs]
        start, end = b.start, b.end
        key = id(insns[start])
        hit = blk_prev.get(key)
        if hit is not None and (hit[1] is st or hit[1] == st) and hit[0] == insns[start:end]:
            before[start:end] = hit[2]
            blk_memo[key] = hit
            st = hit[3]
        else:
            entry = st
            st = _block(insns, start, end, st, before, prog_type)
            blk_memo[key] = (insns[start:end], entry, before[start:end], st)
        for s in b.succs:
            old = block_in.get(s)
            if old is None:
                new = st
            else:
                new = old.join(st)
                if new == old:
                    continue
                v = visits[s] = visits.get(s, 0) + 1
                if v > 1:  # stack slots still changing are dropped early (joining them is costly), ...
                    new = _widen(old, new, regs_too=v > 3)  # ... registers get a few more rounds
            block_in[s] = new
            if s not in queued:
                queued.add(s)
                heapq.heappush(heap, rank[s])


def _block(insns: list[Insn], start: int, end: int, st: State, before: list[State | None], prog_type: int
           ) -> State:
    """Run one block from entry state ``st``, filling ``before``; returns the exit state."""
    regs = list(st[0])
    spills = st[1]
    for i in range(start, end):
        before[i] = st
        ins = insns[i]
        c = ins.code
        if c == _MOV64_K:  # the commonest instruction: inline
            v = imm64(ins.imm)
            regs[ins.dst] = _CONSTS.get(v) or _const(v)
        elif c == _MOV64_X and not ins.off:
            regs[ins.dst] = regs[ins.src]
        elif c in _NO_VALUE:  # jumps and exit change no value
            continue
        elif c & CLASS_MASK == _ALU64 or c & CLASS_MASK == _ALU:
            regs[ins.dst] = _alu(ins, regs)
        elif c & CLASS_MASK == _LDX:  # loads (``_step``'s case, without the extra call)
            regs[ins.dst] = _load(ins, st, prog_type)
        elif c & _MODE_CLASS == _STX_MEM or c & _MODE_CLASS == _ST_MEM:  # plain stores
            spills = _store(ins, st)
        else:
            spills = _step(ins, regs, st, prog_type)
        st = _new(State, (tuple(regs), spills))
    return st
