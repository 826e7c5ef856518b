"""Data alignment: put back together the loads and stores clang split into bytes.

Not knowing a pointer's alignment, LLVM's BPF backend reads a 16/32/64-bit field as byte loads joined by
shifts and ors (``r1 = *(u8 *)(r7 + 13); r1 <<= 8; r2 = *(u8 *)(r7 + 12); r1 |= r2``), and writes one as a
byte store per shifted copy of the value. Where the verifier accepts the wide access, one load or store does.

What the verifier accepts (kernel/bpf/verifier.c, ``check_ptr_alignment``; x86-64 has
``CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS``, so alignment is only strict when the program asks for it with
``BPF_F_STRICT_ALIGNMENT``):

- packet, packet meta, map value: any alignment (not strict on x86); the packet range the byte accesses
  proved covers the wide one because it covers every byte of it;
- arena: not alignment-checked at all (PROBE_MEM32 accesses);
- stack: always strict (spill tracking needs it): the wide access must be aligned to its size;
- context: each field has its own allowed sizes; only SYSCALL contexts (a plain buffer, ``off % size == 0``)
  are merged, aligned;
- anything the analysis cannot name is left alone.

A load composition is recognised by walking back from an ``|=`` through its single-use operands (block-local
def-use, ``capsule.opt.local``) (byte/half loads, left shifts by whole bytes, register copies) inside one basic
block; it must fill bytes ``0..N-1`` of the result from ``base+off .. base+off+N-1`` in little-endian order,
from one base value. The wide load replaces the ``|=`` if the base is unchanged there and nothing in between
may write memory; else (the last piece's load overwrote the base: ``r0 = *(u8 *)(r0 + 3)``) it goes where the
last piece was loaded, into that piece's register, and the ``|=`` becomes a copy of it. A piece may also be
stored as it is (the Sysdig probe copies a packed field and decodes it): if every piece is, the copies become
one wide store too.

A store group is a set of stores in one block of ``V >> 8k`` (through copies and right shifts) to
``base+off+k``; each 2/4/8-byte window the group fills becomes one store of ``V``, at the last of its pieces
where ``V`` is still intact (clang shifts ``V`` in place for the last piece). A byte-wise copy is a set of
``rX = *(uK *)(S + s + k); *(uK *)(D + d + k) = rX`` pairs (a piece may go through a stack spill and fill
whose slot nothing else reads); each window becomes one load, at the last piece's load, and one store.

Moving a piece's access to the wide access's position must not cross a call or an access that may touch the
same bytes: same base value with overlapping offsets, or pointers the value analysis cannot tell apart (the
stack is apart from everything else, two maps' values from each other). Loads and stores of a copy may
interleave only when the source and destination are apart. Pieces all lie in one block, so the packet range
the verifier proved for them covers the wide access (no bounds check lies between them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import BYTES_SIZE, FP, MODE_MASK, Alu, Class, Mode, Size, Src
from capsule.bpf.uapi import ProgType

from ..analysis import Analysis
from ..blockvals import BlockValues, ValueId
from ..effects import effect, mem_size
from ..local import WINDOW
from ..values import TOP, Kind, Val, access_val
from .base import Edits, Pass

_ANY_ALIGN = (Kind.PKT, Kind.PKT_META, Kind.MAP_VALUE, Kind.ARENA)
_SPILL = Class.STX | Mode.MEM | Size.DW
_FILL = Class.LDX | Mode.MEM | Size.DW
_UNKNOWN = (Kind.TOP, Kind.SCALAR)
_ORS = (Class.ALU64 | Alu.OR | Src.X, Class.ALU | Alu.OR | Src.X)
_NARROW_LOADS = frozenset(Class.LDX | Mode.MEM | s for s in (Size.W, Size.H, Size.B))
_NARROW_STORES = frozenset(Class.STX | Mode.MEM | s for s in (Size.W, Size.H, Size.B))
_MAX_DEPTH = 24  # how deep ``_trace`` follows a composition


def wide_access_ok(base: Val, size: int, prog_type: int) -> bool:
    """Whether the verifier accepts a ``size``-byte access at pointer ``base`` (with the access offset)."""
    if base.kind in _ANY_ALIGN:
        return True
    if base.kind == Kind.STACK or (base.kind == Kind.CTX and prog_type == ProgType.SYSCALL):
        off = base.const_offset
        return off is not None and off % size == 0
    return False


@dataclass
class _Comp:
    base: tuple[int, ValueId]  # base register and the id of its value at the loads (``BlockValues.value_id``)
    bytes: dict[int, int]  # byte position in the value -> memory offset from the base
    insns: set[int]
    first: int  # earliest instruction involved
    copies: dict[int, int] = field(default_factory=dict)  # piece load -> the store that also writes its byte(s)


class Align(Pass):
    name = "align"
    summary = "merge byte-wise loads/stores that clang split into one wide access where the verifier allows"
    _ids: BlockValues  # set by ``find``: the registers' values, named over whole blocks
    # set by ``find``: (reg, at, w32) -> (the trace, or None; how many levels deeper it looked). A chain of
    # ``|=`` is traced once from each of its ors: without this, every later or re-traces all the earlier ones
    _traced: dict[tuple[int, int, bool], tuple[_Comp | None, int]]

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        self._ids = BlockValues(a)
        self._traced = {}
        if any(ins.code in _NARROW_LOADS for ins in insns):
            # last or first: an or that completes a composition comes after the ors of its parts, so the whole
            # value is merged at once; the parts' own merges (2 bytes, then 4, then 8) took a round each
            for i in range(len(insns) - 1, -1, -1):
                ins = insns[i]
                if ins.code in _ORS and a.values.reachable(i) and e.free(i):
                    self._load(a, e, i, ins)
        if sum(1 for ins in insns if ins.code in _NARROW_STORES) >= 2:
            self._stores(a, e)
            self._copies(a, e)
        self._traced = {}  # (dropped: the next round asks about a new code)

    # -- loads ---------------------------------------------------------------------------------------------
    def _trace(self, a: Analysis, reg: int, at: int, w32: bool, depth: int = 0) -> _Comp | None:
        """The pieces ``reg`` is composed of at ``at`` (a fresh ``_Comp`` the caller may change)."""
        c, _ = self._trace_h(a, reg, at, w32, depth)
        return c

    def _trace_h(self, a: Analysis, reg: int, at: int, w32: bool, depth: int) -> tuple[_Comp | None, int | None]:
        """``_trace`` and the number of levels below ``depth`` it looked (None: it hit the depth limit, so a
        shallower call could find more). A remembered trace stands for a call at any depth from which it
        stays within the limit: the walk is then the same."""
        key = (reg, at, w32)
        hit = self._traced.get(key)
        if hit is not None and depth + hit[1] <= _MAX_DEPTH:
            return _copy_comp(hit[0]), hit[1]
        c, h = self._trace_walk(a, reg, at, w32, depth)
        if h is not None:
            self._traced[key] = (_copy_comp(c), h)
        return c, h

    def _trace_walk(self, a: Analysis, reg: int, at: int, w32: bool, depth: int) -> tuple[_Comp | None, int | None]:
        if depth > _MAX_DEPTH:
            return None, None
        h: int | None = 0

        def sub(r: int, d: int, w: bool) -> _Comp | None:
            nonlocal h
            c, hs = self._trace_h(a, r, d, w, depth + 1)
            h = None if hs is None or h is None else max(h, hs + 1)
            return c

        loc = a.local
        d = loc.def_before(at, reg)
        if d is None or d < 0:
            return None, h
        ins = a.code.insns[d]
        copy = None
        # (over the whole block: clang leaves a shifted piece's register unwritten for long, and a windowed
        # look would find the composition only once earlier merges had shortened the block)
        if not loc.uses_in_block(d, reg, {at}):
            # a loaded piece may also be stored as it is (the probe copies a field and decodes it)
            copy = _copy_store(a, d, at) if ins.code in _NARROW_LOADS else None
            if copy is None:
                return None, h
        limit = 4 if w32 else 8
        c: _Comp | None
        if ins.cls == Class.LDX and (ins.code & MODE_MASK) == Mode.MEM:
            n = mem_size(ins)
            if n > limit:
                return None, h
            c = _Comp((ins.src, self._ids.value_id(d, ins.src)), {k: ins.off + k for k in range(n)}, {d}, d)
            if copy is not None:
                c.copies[d] = copy
        elif ins.code in (Class.ALU64 | Alu.LSH | Src.K, Class.ALU | Alu.LSH | Src.K) and ins.imm % 8 == 0:
            c = sub(ins.dst, d, w32 or ins.cls == Class.ALU)
            if c is None:
                return None, h
            k = ins.imm // 8
            c.bytes = {p + k: o for p, o in c.bytes.items()}
            if c.bytes and max(c.bytes) >= (4 if ins.cls == Class.ALU else 8):
                return None, h
        elif ins.code in (Class.ALU64 | Alu.OR | Src.X, Class.ALU | Alu.OR | Src.X):
            w = w32 or ins.cls == Class.ALU
            c = sub(ins.dst, d, w)
            c2 = sub(ins.src, d, w) if c is not None else None
            c = _merge(c, c2)
        elif ins.code in (Class.ALU64 | Alu.MOV | Src.X, Class.ALU | Alu.MOV | Src.X) and ins.off == 0:
            c = sub(ins.src, d, w32 or ins.cls == Class.ALU)
        else:
            return None, h
        if c is None or (c.bytes and max(c.bytes) >= limit):
            return None, h
        c.insns.add(d)
        c.first = min(c.first, d)
        return c, h

    def _load(self, a: Analysis, e: Edits, i: int, ins: Insn) -> None:
        w32 = ins.cls == Class.ALU
        c = _merge(self._trace(a, ins.dst, i, w32), self._trace(a, ins.src, i, w32))
        if c is None:
            return
        n = len(c.bytes)
        if n not in (2, 4, 8) or set(c.bytes) != set(range(n)):
            return
        off = c.bytes[0]
        if any(c.bytes[k] != off + k for k in range(n)) or not -(1 << 15) <= off < 1 << 15:
            return
        base_reg, base_id = c.base
        if c.copies or self._ids.value_id(i, base_reg) != base_id:
            # copied pieces, or the last piece's load overwrote the base: load where the last piece was loaded
            self._load_early(a, e, i, ins, c, n, off)
            return
        if not wide_access_ok(access_val(a.values, i, base_reg, off), n, a.prog_type):
            return
        stack = access_val(a.values, i, base_reg, off).kind == Kind.STACK
        for j in range(c.first, i):
            if j not in c.insns and _writes_memory(a, j, stack):
                return
        if not e.free(i, *c.insns):
            return
        e.replace[i] = Insn(Class.LDX | BYTES_SIZE[n] | Mode.MEM, ins.dst, base_reg, off, sym=ins.sym)
        e.delete.update(c.insns)
        e.rewrites += 1

    def _load_early(self, a: Analysis, e: Edits, i: int, ins: Insn, c: _Comp, n: int, off: int) -> None:
        """The wide load goes at the last piece's load, into its register (which then holds the whole value up
        to ``i``), and ``i`` becomes a copy of that register. Pieces that are also stored as they are (copied
        byte for byte elsewhere) become one wide store where the last piece was stored."""
        insns = a.code.insns
        loads = sorted(d for d in c.insns if insns[d].cls == Class.LDX)
        sreg, sid = c.base
        last = loads[-1]
        x = insns[last].dst
        # x must hold the wide value from ``last`` to ``i``: only the deleted pieces may write it in between
        if any(a.effects[m].defs >> x & 1 and m not in c.insns for m in range(last + 1, i)):
            return
        src = access_val(a.values, last, sreg, off)
        if not wide_access_ok(src, n, a.prog_type):
            return
        stores = sorted(c.copies.values())
        at = c.copies.get(last)
        wide_store: Insn | None = None  # replaces the store at ``at``
        if stores:
            if set(c.copies) != set(loads):
                return  # every piece must be copied (a piece read by its store and its shift stays)
            assert at is not None  # the last load is one of them
            first = insns[stores[0]]
            dreg, did = first.dst, self._ids.value_id(stores[0], first.dst)
            deltas = {insns[c.copies[d]].off - insns[d].off for d in loads}
            if len(deltas) != 1 or any(insns[s].dst != dreg or self._ids.value_id(s, dreg) != did for s in stores):
                return
            (delta,) = deltas
            if not -(1 << 15) <= off + delta <= (1 << 15) - n:
                return
            dst = access_val(a.values, at, dreg, off + delta)
            if not wide_access_ok(dst, n, a.prog_type):
                return
            if not self._movable(a, loads, stores, sid, off, did, off + delta, n, src, dst):
                return
            wide_store = Insn(Class.STX | BYTES_SIZE[n] | Mode.MEM, dreg, x, off + delta, sym=insns[at].sym)
        else:
            for j in range(loads[0], last):
                if j not in loads and not _disjoint(a, self._ids, j, sid, off, off + n, src, reads=False):
                    return
        if not e.free(i, *c.insns, *stores):
            return
        e.replace[last] = Insn(Class.LDX | BYTES_SIZE[n] | Mode.MEM, x, sreg, off, sym=insns[last].sym)
        if at is not None and wide_store is not None:
            e.replace[at] = wide_store
        if ins.dst == x:
            e.delete.add(i)
        else:
            e.replace[i] = Insn(Class.ALU64 | Alu.MOV | Src.X, ins.dst, x, 0, 0, sym=ins.sym)
        e.delete.update(c.insns - {last})
        e.delete.update(s for s in stores if s != at)
        e.rewrites += 1

    def _movable(self, a: Analysis, loads: list[int], stores: list[int], sid: ValueId, soff: int, did: ValueId,
                 doff: int, n: int, src: Val, dst: Val) -> bool:
        """Whether the piece loads may all move to the last of them, and the piece stores to any one of them:
        nothing else between them touches those bytes, and where loads and stores interleave, the two
        ranges are apart."""
        if stores[0] < loads[-1]:
            same = sid == did
            if not (same and (soff + n <= doff or doff + n <= soff)) and not (not same and _apart(src, n, dst, n)):
                return False
        for j in range(loads[0], loads[-1]):
            if j not in loads and not _disjoint(a, self._ids, j, sid, soff, soff + n, src, reads=False):
                return False
        members = set(loads) | set(stores)
        for j in range(stores[0] + 1, stores[-1]):
            if j not in members and not _disjoint(a, self._ids, j, did, doff, doff + n, dst):
                return False
        return True

    # -- stores --------------------------------------------------------------------------------------------
    def _source(self, a: Analysis, reg: int, at: int, chain: set[int]) -> tuple[int, ValueId, int] | None:
        """(register, its value id, right shift) such that ``reg`` at ``at`` holds ``that >> shift``."""
        shift = 0
        for _ in range(16):
            d = a.local.def_before(at, reg)
            if d is None or d < 0:
                break
            ins = a.code.insns[d]
            if ins.code == Class.ALU64 | Alu.RSH | Src.K and ins.imm % 8 == 0:
                shift += ins.imm
                chain.add(d)
                at = d
            elif ins.code == Class.ALU64 | Alu.MOV | Src.X and ins.off == 0:
                chain.add(d)
                reg, at = ins.src, d
            else:
                break
        return reg, self._ids.value_id(at, reg), shift

    def _stores(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        # one group per (block, base value, source value, offset of the source's byte 0): clang often writes
        # one value to two places, interleaving the two sets of byte stores
        groups: dict[tuple[int, int, ValueId, int, ValueId, int], list[_Member]] = {}
        for j, ins in enumerate(insns):
            if ins.code not in _NARROW_STORES or not a.values.reachable(j):
                continue
            size = mem_size(ins)
            if size > 4:
                continue
            chain: set[int] = set()
            src = self._source(a, ins.src, j, chain)
            if src is None or src[2] >= 64:
                continue
            off = ins.off - src[2] // 8
            key = (a.block_of[j], ins.dst, self._ids.value_id(j, ins.dst), src[0], src[1], off)
            groups.setdefault(key, []).append(_Member(j, src[2] // 8, size, chain))
        for (_, base_reg, base_id, vreg, vid, off), members in groups.items():
            if len(members) >= 2:
                self._store_group(a, e, base_reg, base_id, vreg, vid, off, members)

    def _store_group(self, a: Analysis, e: Edits, base_reg: int, base_id: ValueId, vreg: int, vid: ValueId,
                     off: int, members: list[_Member]) -> None:
        insns = a.code.insns
        for n in (8, 4, 2):
            # the members inside bytes 0..n-1 of the value; one that straddles the window's end spoils it
            inside = [m for m in members if m.pos + m.size <= n]
            if any(m.pos < n < m.pos + m.size for m in members):
                continue
            covered: list[int] = sorted(b for m in inside for b in range(m.pos, m.pos + m.size))
            if len(inside) < 2 or covered != list(range(n)) or not -(1 << 15) <= off <= (1 << 15) - n:
                continue
            idx = sorted(m.at for m in inside)
            # the wide store goes where the value and the base are still those the pieces stored: at the
            # last piece, else (the value shifted in place for the next piece) at an earlier one
            at = next((j for j in reversed(idx) if self._ids.value_id(j, vreg) == vid), None)
            if at is None:
                return
            target = access_val(a.values, at, base_reg, off)
            if not wide_access_ok(target, n, a.prog_type):
                continue
            # moving every piece to ``at`` must not move it across a call or an access to the same bytes
            for j in range(idx[0], idx[-1]):
                if j not in idx and not _disjoint(a, self._ids, j, base_id, off, off + n, target):
                    return
            chain: set[int] = set().union(*(m.chain for m in inside))
            dead = _dead_chain(a, {d for d in chain if insns[d].dst != base_reg}, set(idx))
            if not e.free(*idx, *dead):
                return
            e.replace[at] = Insn(Class.STX | BYTES_SIZE[n] | Mode.MEM, base_reg, vreg, off, sym=insns[at].sym)
            e.delete.update(j for j in idx if j != at)
            e.delete.update(dead)
            e.rewrites += 1
            return


    # -- copies --------------------------------------------------------------------------------------------
    def _copies(self, a: Analysis, e: Edits) -> None:
        """Byte-wise copies ``rX = *(u8 *)(S + s + k); ...; *(u8 *)(D + d + k) = rX``: one wide load, one store."""
        insns = a.code.insns
        loc = a.local
        groups: dict[tuple[int, ValueId, ValueId, int], list[tuple[int, int, tuple[int, ...]]]] = {}
        for j, ins in enumerate(insns):
            if ins.code not in _NARROW_STORES or not a.values.reachable(j):
                continue
            d = loc.def_before(j, ins.src)
            if d is None or d < 0:
                continue
            extra: tuple[int, ...] = ()
            if insns[d].code == _FILL and insns[d].src == FP:
                # the piece went through a stack slot (register pressure): load, spill, ..., fill, store
                spilled = _spilled_piece(a, d, j)
                if spilled is None:
                    continue
                d, extra = spilled
            elif not loc.only_use(d, ins.src, j):
                continue
            if insns[d].code not in _NARROW_LOADS or mem_size(insns[d]) != mem_size(ins):
                continue
            ld = insns[d]
            ids = self._ids
            # (by value: the pieces may reach the same pointer through different registers)
            key = (a.block_of[j], ids.value_id(d, ld.src), ids.value_id(j, ins.dst), ins.off - ld.off)
            groups.setdefault(key, []).append((d, j, extra))
        for (_, sid, did, delta), pairs in groups.items():
            if len(pairs) >= 2:
                self._copy_group(a, e, sid, did, delta, pairs)

    def _copy_group(self, a: Analysis, e: Edits, sid: ValueId, did: ValueId, delta: int,
                    pairs: list[tuple[int, int, tuple[int, ...]]]) -> None:
        """Cover the copied bytes, lowest first, with the widest windows that whole pieces fill."""
        insns = a.code.insns
        at: dict[int, tuple[int, int, tuple[int, ...]]] = {}  # source offset -> the piece starting there
        for piece in pairs:
            if insns[piece[0]].off in at:
                return  # the same bytes copied twice: leave it
            at[insns[piece[0]].off] = piece
        offs = sorted(at)
        done: set[int] = set()
        for lo in offs:
            if lo in done:
                continue
            for n in (8, 4, 2):
                win: list[tuple[int, int, tuple[int, ...]]] = []
                b = lo
                while b < lo + n and b in at:
                    win.append(at[b])
                    b += mem_size(insns[at[b][0]])
                if b == lo + n and len(win) >= 2 and self._copy(a, e, sid, did, delta, lo, n, win):
                    done.update(range(lo, lo + n))
                    break

    def _copy(self, a: Analysis, e: Edits, sid: ValueId, did: ValueId, delta: int, lo: int, n: int,
              pairs: list[tuple[int, int, tuple[int, ...]]]) -> bool:
        insns = a.code.insns
        if not (-(1 << 15) <= min(lo, lo + delta) and max(lo, lo + delta) + n <= 1 << 15):
            return False
        loads = sorted(ld for ld, _, _ in pairs)
        stores = sorted(st for _, st, _ in pairs)
        spills = [k for _, _, extra in pairs for k in extra]
        last_load = loads[-1]
        # the wide load goes at the last piece's load, into its register; the wide store where that register's
        # byte was stored (its only reader, so the register holds the value up to there)
        at, last_extra = next((st, extra) for ld, st, extra in pairs if ld == last_load)
        if last_extra:
            return False  # its register only reached the stack
        sreg, dreg = insns[last_load].src, insns[at].dst
        src = access_val(a.values, last_load, sreg, lo)
        dst = access_val(a.values, at, dreg, lo + delta)
        if not (wide_access_ok(src, n, a.prog_type) and wide_access_ok(dst, n, a.prog_type)):
            return False
        # (loads and stores may interleave, as in an unrolled ``memcpy``, if the two ranges are apart)
        if not self._movable(a, loads, stores, sid, lo, did, lo + delta, n, src, dst):
            return False
        if not e.free(*loads, *stores, *spills):
            return False
        reg = insns[last_load].dst
        e.replace[last_load] = Insn(Class.LDX | BYTES_SIZE[n] | Mode.MEM, reg, sreg, lo, sym=insns[last_load].sym)
        e.replace[at] = Insn(Class.STX | BYTES_SIZE[n] | Mode.MEM, dreg, reg, lo + delta, sym=insns[at].sym)
        e.delete.update(loads[:-1])
        e.delete.update(st for st in stores if st != at)
        e.delete.update(spills)
        e.rewrites += 1
        return True


def _copy_store(a: Analysis, d: int, at: int) -> int | None:
    """The store of the same size that writes the value load ``d`` read, when that store and ``at`` are its only
    readers."""
    insns = a.code.insns
    reg = insns[d].dst
    bit = 1 << reg
    for m in range(d + 1, at):
        if a.effects[m].uses & bit:
            s = insns[m]
            ok = s.code in _NARROW_STORES and s.src == reg and s.dst != reg and mem_size(s) == mem_size(insns[d])
            return m if ok and a.local.uses_within(d, reg, {at, m}) else None
        if a.effects[m].defs & bit:
            return None
    return None


def _spilled_piece(a: Analysis, fill: int, store: int) -> tuple[int, tuple[int, int]] | None:
    """For ``rB = *(u64 *)(r10 + s)`` read only by ``store``: the load whose register was spilled there, with
    the spill and the fill, when both may go (the slot is read by nothing else, then dead)."""
    insns = a.code.insns
    loc = a.local
    f = insns[fill]
    if not loc.only_use(fill, f.dst, store):
        return None
    stack = a.stack
    cfg = a.cfg
    slot = ((1 << 8) - 1) << (512 + f.off) if -512 <= f.off <= -8 else 0
    if not slot or not stack.stack_tracked.get(cfg.func_of[fill], False) or stack.live_out[fill] & slot:
        return None
    target = access_val(a.values, fill, FP, f.off)
    for p in range(fill - 1, max(a.block_of[fill], fill - WINDOW) - 1, -1):
        ins = insns[p]
        eff = a.effects[p]
        if ins.code == _SPILL and ins.dst == FP and ins.off == f.off:
            d = loc.def_before(p, ins.src)
            if d is None or d < 0 or not loc.only_use(d, ins.src, p):
                return None
            return d, (p, fill)
        if eff.call or (eff.load or eff.store) and not _apart(_access(a, p), mem_size(ins), target, 8):
            return None
    return None


def _access(a: Analysis, j: int) -> Val:
    ins = a.code.insns[j]
    if ins.cls == Class.LD:
        return TOP
    return access_val(a.values, j, ins.src if ins.cls == Class.LDX else ins.dst, ins.off)


@dataclass
class _Member:
    at: int  # the store
    pos: int  # first byte of the value it stores
    size: int
    chain: set[int]  # the copies and shifts that made its register


def _dead_chain(a: Analysis, chain: set[int], stores: set[int]) -> set[int]:
    """The copies/shifts of ``chain`` read only by ``stores`` and by other dead ones (a copy feeding a shift
    that stays must stay too)."""
    dead = set(chain)
    changed = True
    while changed:
        changed = False
        for d in sorted(dead):
            if not a.local.uses_within(d, a.code.insns[d].dst, dead | stores):
                dead.discard(d)
                changed = True
    return dead


def _disjoint(a: Analysis, ids: BlockValues, j: int, base_id: ValueId, lo: int, hi: int, target: Val,
              reads: bool = True) -> bool:
    """Whether instruction ``j`` can neither write (nor, with ``reads``, read) bytes ``lo..hi-1`` from the
    pointer named ``base_id``, and calls nothing."""
    ins = a.code.insns[j]
    eff = effect(ins)
    if eff.call:
        return False
    if not (eff.store or (reads and eff.load)):
        return True
    if ins.cls == Class.LD:  # legacy packet loads: only the stack is surely apart
        return target.kind == Kind.STACK
    reg = ins.src if ins.cls == Class.LDX else ins.dst
    size = mem_size(ins)
    if ids.value_id(j, reg) == base_id:
        return ins.off + size <= lo or hi <= ins.off
    return _apart(access_val(a.values, j, reg, ins.off), size, target, hi - lo)


def _apart(p: Val, psize: int, q: Val, qsize: int) -> bool:
    """Whether ``psize`` bytes at ``p`` and ``qsize`` bytes at ``q`` (access pointers) surely do not overlap."""
    if p.kind in _UNKNOWN or q.kind in _UNKNOWN:
        return False
    if (p.kind == Kind.STACK) != (q.kind == Kind.STACK):
        return True  # the stack frame is private: no other pointer reaches it
    if p.kind == Kind.STACK:
        o, t = p.const_offset, q.const_offset
        return o is not None and t is not None and (o + psize <= t or t + qsize <= o)
    # two maps' values are separate allocations (the analysis names a map value's map only when it is sure)
    return p.kind == q.kind == Kind.MAP_VALUE and p.ref is not None and q.ref is not None and p.ref != q.ref

def _copy_comp(c: _Comp | None) -> _Comp | None:
    return None if c is None else _Comp(c.base, dict(c.bytes), set(c.insns), c.first, dict(c.copies))


def _merge(c1: _Comp | None, c2: _Comp | None) -> _Comp | None:
    if c1 is None or c2 is None or c1.base != c2.base or set(c1.bytes) & set(c2.bytes):
        return None
    return _Comp(c1.base, {**c1.bytes, **c2.bytes}, c1.insns | c2.insns, min(c1.first, c2.first),
                 {**c1.copies, **c2.copies})


def _writes_memory(a: Analysis, j: int, base_is_stack: bool) -> bool:
    eff = effect(a.code.insns[j])
    if eff.call:
        return True
    if not eff.store:
        return False
    ins = a.code.insns[j]
    return base_is_stack or access_val(a.values, j, ins.dst, ins.off).kind != Kind.STACK
