"""Value analysis: what each register holds before each instruction, as far as the bytecode tells.

A value is a scalar with known bits (``Tnum``; a constant has no unknown bits) or a pointer of a kind the
verifier distinguishes (context, packet, packet end, packet meta, map, map value, stack, arena, other) with
its offset from the start of the object as known bits, which also gives its alignment. ``TOP`` is "anything".
The analysis is a forward data flow per function; joins only lose information, so it terminates.

Where pointers come from: ``r1`` at a program's entry is the context and ``r10`` the frame; fields of the
context give packet pointers (XDP ``data``/``data_end``/``data_meta``; ``__sk_buff`` ``data``/``data_end``/
``data_meta`` for skb programs); ``ld_imm64`` of a map or of global data; ``bpf_map_lookup_elem`` (and the
per-cpu lookup) returns a map value; ``addr_space_cast`` to address space 0 makes an arena pointer. 8-byte
register spills to fixed stack slots are followed through the stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import SIZE_BYTES, Alu, CallKind, Class, Mode, Pseudo, Size, Src

from .cfg import CFG
from .effects import CALLER_SAVED, is_addr_space_cast
from .semantics import M64, alu_result, imm64
from .tnum import Tnum

__all__ = ["Kind", "Val", "State", "Values", "analyze_values", "TOP"]


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


@dataclass(frozen=True)
class Val:
    kind: Kind
    tn: Tnum = Tnum(0, M64)  # scalar bits, or pointer offset from the object's start
    ref: str | None = None  # map name for MAP_PTR / MAP_VALUE

    @staticmethod
    def const(v: int) -> Val:
        return Val(Kind.SCALAR, Tnum.const(v))

    @staticmethod
    def scalar(tn: Tnum | None = None) -> Val:
        return Val(Kind.SCALAR, tn or Tnum.unknown())

    @property
    def is_const(self) -> bool:
        return self.kind == Kind.SCALAR and self.tn.is_const

    @property
    def is_pointer(self) -> bool:
        return self.kind not in (Kind.TOP, Kind.SCALAR)

    @property
    def const_offset(self) -> int | None:
        """A pointer's exact offset (signed), when known."""
        if not self.is_pointer or not self.tn.is_const:
            return None
        v = self.tn.value
        return v - (1 << 64) if v >> 63 else v

    def join(self, o: Val) -> Val:
        if self == o:
            return self
        if self.kind != o.kind or self.ref != o.ref or self.kind == Kind.TOP:
            return TOP
        return Val(self.kind, self.tn.join(o.tn), self.ref)


TOP = Val(Kind.TOP)
_UNINIT = Val(Kind.TOP)

# context fields that hold packet pointers: prog type -> {offset: kind}
_XDP = {0: Kind.PKT, 4: Kind.PKT_END, 8: Kind.PKT_META}
_SKB = {76: Kind.PKT, 80: Kind.PKT_END, 140: Kind.PKT_META}
CTX_POINTERS: dict[int, dict[int, Kind]] = {6: _XDP, 3: _SKB, 4: _SKB, 8: _SKB, 10: _SKB, 11: _SKB, 12: _SKB}
_MAP_VALUE_HELPERS = (1, 195)  # map_lookup_elem, map_lookup_percpu_elem


@dataclass
class State:
    regs: tuple[Val, ...]
    spills: dict[int, Val] = field(default_factory=dict)  # fp offset of an 8-byte slot -> value

    def join(self, o: State) -> State:
        regs = tuple(a.join(b) for a, b in zip(self.regs, o.regs, strict=True))
        spills = {k: v.join(o.spills[k]) for k, v in self.spills.items() if k in o.spills}
        spills = {k: v for k, v in spills.items() if v != TOP}
        return State(regs, spills)

    def __eq__(self, o: object) -> bool:
        return isinstance(o, State) and self.regs == o.regs and self.spills == o.spills


@dataclass
class Values:
    before: list[State | None]  # per instruction; None for unreachable code

    def reg(self, i: int, r: int) -> Val:
        s = self.before[i]
        return TOP if s is None else s.regs[r]

    def reachable(self, i: int) -> bool:
        return self.before[i] is not None


def _mem_access(st: State, base: int, off: int) -> Val:
    v = st.regs[base]
    if not v.is_pointer:
        return v
    return Val(v.kind, v.tn.add(Tnum.const(off)), v.ref)


def access_val(values: Values, i: int, base: int, off: int) -> Val:
    """The pointer (kind, offset) that instruction ``i`` accesses through ``base + off``."""
    s = values.before[i]
    return TOP if s is None else _mem_access(s, base, off)


def _alu(ins: Insn, st: State) -> Val:
    w32 = ins.cls == Class.ALU
    op = ins.code & 0xF0
    d = st.regs[ins.dst]
    s = st.regs[ins.src] if ins.code & Src.X else Val.const(ins.imm & 0xFFFFFFFF if w32 else imm64(ins.imm))
    if is_addr_space_cast(ins):
        if ins.imm >> 16 == 0:  # to the kernel address space: an arena pointer the program may dereference
            return Val(Kind.ARENA, Tnum.unknown())
        return Val.scalar()
    if op == Alu.MOV and not ins.off:
        if ins.code & Src.X:
            if w32:
                return Val.scalar(s.tn.trunc32()) if s.kind == Kind.SCALAR else Val.scalar(Tnum.range_bits(32))
            return s
        return s
    if d.kind == Kind.SCALAR and (s.kind == Kind.SCALAR or op in (Alu.NEG, Alu.END)):
        if d.tn.is_const and (s.tn.is_const or not ins.code & Src.X or op in (Alu.NEG, Alu.END)):
            r = alu_result(ins, d.tn.value, s.tn.value)
            if r is not None:
                return Val.const(r)
        return Val.scalar(_alu_bits(ins, d.tn, s.tn, w32))
    if not w32 and op in (Alu.ADD, Alu.SUB) and not ins.off:
        if d.is_pointer and s.kind == Kind.SCALAR:
            tn = d.tn.add(s.tn) if op == Alu.ADD else d.tn.sub(s.tn)
            return Val(d.kind, tn, d.ref)
        if op == Alu.ADD and s.is_pointer and d.kind == Kind.SCALAR:
            return Val(s.kind, s.tn.add(d.tn), s.ref)
        if op == Alu.SUB and d.is_pointer and s.is_pointer:
            return Val.scalar()
    if w32:
        return Val.scalar(Tnum.range_bits(32))
    return TOP if (d.kind == Kind.TOP or s.kind == Kind.TOP) else Val.scalar()


def _alu_bits(ins: Insn, a: Tnum, b: Tnum, w32: bool) -> Tnum:
    op = ins.code & 0xF0
    if w32:
        a, b = a.trunc32(), b.trunc32()
    r: Tnum
    if ins.off and op != Alu.MOV:
        r = Tnum.unknown()
    elif op == Alu.ADD:
        r = a.add(b)
    elif op == Alu.SUB:
        r = a.sub(b)
    elif op == Alu.AND:
        r = a.and_(b)
    elif op == Alu.OR:
        r = a.or_(b)
    elif op == Alu.XOR:
        r = a.xor(b)
    elif op == Alu.LSH and b.is_const:
        r = a.lsh(b.value & (31 if w32 else 63))
    elif op == Alu.RSH and b.is_const:
        r = a.rsh(b.value & (31 if w32 else 63))
    elif op == Alu.END and ins.imm in (16, 32) and not (ins.code & Src.X) and ins.cls == Class.ALU:
        r = Tnum(a.value & ((1 << ins.imm) - 1), a.mask & ((1 << ins.imm) - 1))
    elif op == Alu.END and ins.imm in (16, 32):
        r = Tnum.range_bits(ins.imm)
    else:
        r = Tnum.unknown()
    return r.trunc32() if w32 else r


def _load(ins: Insn, st: State, prog_type: int) -> Val:
    size = SIZE_BYTES[Size(ins.code & 0x18)]
    p = _mem_access(st, ins.src, ins.off)
    if (ins.code & 0xE0) == Mode.MEMSX:
        return Val.scalar()
    if p.kind == Kind.CTX and p.const_offset is not None and size == 4:
        kind = CTX_POINTERS.get(prog_type, {}).get(p.const_offset)
        if kind is not None:
            return Val(kind, Tnum.const(0))
    if p.kind == Kind.STACK and size == 8 and p.const_offset is not None and p.const_offset in st.spills:
        return st.spills[p.const_offset]
    if size < 8:
        return Val.scalar(Tnum.range_bits(size * 8))
    if p.kind in (Kind.PKT, Kind.ARENA, Kind.STACK):
        return Val.scalar()
    return TOP  # an 8-byte field may hold a kernel pointer (ctx fields, kptrs)


def _store(ins: Insn, st: State) -> dict[int, Val]:
    p = _mem_access(st, ins.dst, ins.off)
    size = SIZE_BYTES[Size(ins.code & 0x18)]
    spills = st.spills
    if p.kind == Kind.STACK and p.const_offset is not None:
        lo = p.const_offset
        spills = {k: v for k, v in spills.items() if k + 8 <= lo or k >= lo + size}
        if size == 8 and (ins.code & 0xE0) == Mode.MEM:
            v = st.regs[ins.src] if ins.cls == Class.STX else Val.const(imm64(ins.imm))
            if v != TOP:
                spills[lo] = v
        return spills
    if p.kind in (Kind.TOP, Kind.STACK):
        return {}
    return spills


def step(ins: Insn, st: State, prog_type: int, i: int, code_targets: dict[int, int]) -> State:
    """The state after ``ins``."""
    regs = list(st.regs)
    spills = st.spills
    cls = ins.cls
    if cls in (Class.ALU, Class.ALU64):
        regs[ins.dst] = _alu(ins, st)
    elif ins.is_ld_imm64:
        if ins.src == Pseudo.NONE:
            regs[ins.dst] = Val.const(ins.imm)
        elif ins.src == Pseudo.MAP_FD:
            regs[ins.dst] = Val(Kind.MAP_PTR, Tnum.const(0), ins.ref)
        elif ins.src in (Pseudo.MAP_VALUE, Pseudo.MAP_IDX_VALUE):
            regs[ins.dst] = Val(Kind.MAP_VALUE, Tnum.const(ins.imm >> 32), ins.ref)
        else:
            regs[ins.dst] = Val(Kind.PTR)
    elif cls == Class.LD:
        size = SIZE_BYTES[Size(ins.code & 0x18)]
        for r in range(6):
            regs[r] = TOP
        regs[0] = Val.scalar(Tnum.range_bits(size * 8))
    elif cls == Class.LDX:
        regs[ins.dst] = _load(ins, st, prog_type)
    elif cls == Class.ST or (cls == Class.STX and (ins.code & 0xE0) == Mode.MEM):
        spills = _store(ins, st)
    elif cls == Class.STX:  # atomics
        spills = _store(ins, st)
        for r in range(11):
            if ins.imm & 1 and r == (0 if ins.imm == 0xF1 else ins.src):
                regs[r] = Val.scalar() if ins.code & 0x18 == Size.DW else Val.scalar(Tnum.range_bits(32))
    elif ins.is_call:
        ret = TOP
        if ins.src == CallKind.HELPER and ins.imm in _MAP_VALUE_HELPERS and regs[1].kind == Kind.MAP_PTR:
            ret = Val(Kind.MAP_VALUE, Tnum.const(0), regs[1].ref)
        for r in range(6):
            if CALLER_SAVED & (1 << r):
                regs[r] = TOP
        regs[0] = ret
        spills = {}
    return State(tuple(regs), spills)


def _widen(old: State, new: State) -> State:
    """Jump to the top of each lattice column that is still changing (bounds the rounds at loop heads)."""
    regs = []
    for o, n in zip(old.regs, new.regs, strict=True):
        if o == n or n.kind == Kind.TOP:
            regs.append(n)
        else:
            regs.append(Val(n.kind, Tnum.unknown(), n.ref))
    spills = {k: v for k, v in new.spills.items() if old.spills.get(k) == v}
    return State(tuple(regs), spills)


def analyze_values(cfg: CFG, prog_type: int) -> Values:
    n = len(cfg.code.insns)
    before: list[State | None] = [None] * n
    insns = cfg.code.insns
    for fstart, fn in cfg.functions.items():
        regs = [_UNINIT] * 11
        regs[10] = Val(Kind.STACK, Tnum.const(0))
        if fstart == 0:
            regs[1] = Val(Kind.CTX, Tnum.const(0))
        block_in: dict[int, State | None] = {b: None for b in fn.blocks}
        block_in[fstart] = State(tuple(regs))
        order = fn.rpo()
        rank = {b: k for k, b in enumerate(order)}
        visits: dict[int, int] = {}
        pending = {fstart}
        while pending:
            bs = min(pending, key=rank.__getitem__)
            pending.discard(bs)
            st = block_in[bs]
            assert st is not None
            b = fn.blocks[bs]
            for i in b.indices():
                before[i] = st
                st = step(insns[i], st, prog_type, i, cfg.code.targets)
            for s in b.succs:
                old = block_in[s]
                new = st if old is None else old.join(st)
                if old is not None and new == old:
                    continue
                visits[s] = visits.get(s, 0) + 1
                if old is not None and visits[s] > 3:
                    new = _widen(old, new)
                block_in[s] = new
                pending.add(s)
    return Values(before)
