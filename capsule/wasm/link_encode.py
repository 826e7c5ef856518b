"""A ``Module`` back to WebAssembly binary: what ``capsule.wasm.link`` needs to hand a merged module to any
engine (wasmtime takes bytes; the kernel path re-reads them, so both run exactly the same encoding).

The encoding is canonical rather than a copy of some original file: sections in the spec's order, locals
grouped in runs, element segments always in the expression form, and only the ``name`` custom section kept
(other custom sections, DWARF above all, describe byte offsets that a merge invalidates).
"""

from __future__ import annotations

from capsule.ints import signed

from .module import (
    BlockType,
    BrTable,
    Data,
    Elem,
    ExternKind,
    Function,
    FuncType,
    GlobalType,
    Instr,
    Limits,
    MemArg,
    MemoryType,
    Module,
    Names,
    SegmentMode,
    TableType,
    ValType,
)
from .opcodes import IMMEDIATE, Imm

FUNC_TYPE = 0x60


def uleb(v: int) -> bytes:
    if v < 0:
        raise ValueError(f"unsigned LEB128 of {v}")
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if (v == 0 and not b & 0x40) or (v == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def name(s: str) -> bytes:
    raw = s.encode()
    return uleb(len(raw)) + raw


def vec(items: list[bytes]) -> bytes:
    return uleb(len(items)) + b"".join(items)


def limits(lim: Limits) -> bytes:
    return b"\x00" + uleb(lim.min) if lim.max is None else b"\x01" + uleb(lim.min) + uleb(lim.max)


def functype(t: FuncType) -> bytes:
    return bytes([FUNC_TYPE]) + vec([bytes([p]) for p in t.params]) + vec([bytes([r]) for r in t.results])


def table_type(t: TableType) -> bytes:
    return bytes([t.elem]) + limits(t.limits)


def global_type(t: GlobalType) -> bytes:
    return bytes([t.type, 1 if t.mutable else 0])


def instr(ins: Instr) -> bytes:
    """One instruction: opcode (0xFC-prefixed ones as prefix + u32) and its immediates."""
    op = ins.op
    head = b"\xfc" + uleb(op & 0xFF) if op >= 0xFC00 else bytes([op])
    kind = IMMEDIATE[op]
    imm = ins.imm
    if kind is Imm.NONE:
        return head
    if kind in (Imm.LOCAL, Imm.GLOBAL, Imm.LABEL, Imm.FUNC, Imm.TABLE, Imm.ELEM, Imm.DATA):
        return head + uleb(ins.imm_as(int))
    if kind is Imm.I32:
        return head + sleb(signed(ins.imm_as(int), 32))
    if kind is Imm.I64:
        return head + sleb(signed(ins.imm_as(int), 64))
    if kind is Imm.F32:
        return head + ins.imm_as(int).to_bytes(4, "little")
    if kind is Imm.F64:
        return head + ins.imm_as(int).to_bytes(8, "little")
    if kind is Imm.MEMARG:
        assert isinstance(imm, MemArg)
        return head + uleb(imm.align) + uleb(imm.offset)
    if kind is Imm.MEMORY:
        return head + uleb(ins.imm_as(int))
    if kind is Imm.MEMORY_MEMORY or kind is Imm.CALL_INDIRECT or kind is Imm.ELEM_TABLE or kind is Imm.TABLE_TABLE:
        a, b = ins.imm_pair()
        return head + uleb(a) + uleb(b)
    if kind is Imm.DATA_MEMORY:
        d, m = ins.imm_pair()
        return head + uleb(d) + uleb(m)
    if kind is Imm.BLOCK:
        assert isinstance(imm, BlockType)
        if imm.type_index is not None:
            return head + sleb(imm.type_index)
        return head + (b"\x40" if imm.result is None else bytes([imm.result]))
    if kind is Imm.BR_TABLE:
        assert isinstance(imm, BrTable)
        return head + vec([uleb(x) for x in imm.labels]) + uleb(imm.default)
    if kind is Imm.SELECT_T:
        return head + vec([bytes([t]) for t in ins.imm_as(tuple)])
    if kind is Imm.REFTYPE:
        return head + bytes([ins.imm_as(ValType)])
    raise AssertionError(f"unhandled immediate kind {kind!r}")  # pragma: no cover


def expr(body: list[Instr]) -> bytes:
    """An instruction sequence; ``body`` ends with its own ``end``, as the reader leaves it."""
    return b"".join(instr(i) for i in body)


def _locals(f: Function) -> bytes:
    runs: list[list[int]] = []
    for t in f.locals[f.num_params :]:
        if runs and runs[-1][1] == t:
            runs[-1][0] += 1
        else:
            runs.append([1, t])
    return vec([uleb(n) + bytes([t]) for n, t in runs])


def _code(f: Function) -> bytes:
    body = _locals(f) + expr(f.body)
    return uleb(len(body)) + body


def _elem(e: Elem) -> bytes:
    items = vec([expr(item) for item in e.items])
    ref = bytes([e.type])
    if e.mode is SegmentMode.ACTIVE:
        assert e.offset_expr is not None
        if e.table == 0 and e.type == ValType.FUNCREF:
            return uleb(4) + expr(e.offset_expr) + items
        return uleb(6) + uleb(e.table) + expr(e.offset_expr) + ref + items
    return uleb(5 if e.mode is SegmentMode.PASSIVE else 7) + ref + items


def _data(d: Data) -> bytes:
    payload = uleb(len(d.init)) + d.init
    if d.mode is SegmentMode.PASSIVE:
        return uleb(1) + payload
    assert d.offset_expr is not None
    if d.memory == 0:
        return uleb(0) + expr(d.offset_expr) + payload
    return uleb(2) + uleb(d.memory) + expr(d.offset_expr) + payload


def _name_map(entries: dict[int, str]) -> bytes:
    return vec([uleb(i) + name(entries[i]) for i in sorted(entries)])


def _names(n: Names) -> bytes:
    subs = []
    if n.module is not None:
        subs.append((0, name(n.module)))
    if n.funcs:
        subs.append((1, _name_map(n.funcs)))
    if n.locals:
        subs.append((2, vec([uleb(f) + _name_map(n.locals[f]) for f in sorted(n.locals)])))
    if n.globals:
        subs.append((7, _name_map(n.globals)))
    return b"".join(bytes([k]) + uleb(len(body)) + body for k, body in subs)


def _section(sid: int, body: bytes) -> bytes:
    return bytes([sid]) + uleb(len(body)) + body


def encode(m: Module) -> bytes:
    """The binary module: ``read_module(encode(m))`` decodes to the same module (offsets aside)."""
    out = [b"\x00asm\x01\x00\x00\x00"]

    def add(sid: int, items: list[bytes], always: bool = False) -> None:
        if items or always:
            out.append(_section(sid, vec(items)))

    add(1, [functype(t) for t in m.types])
    imports = []
    for imp in m.imports:
        head = name(imp.module) + name(imp.name) + bytes([imp.kind])
        if imp.kind == ExternKind.FUNC:
            imports.append(head + uleb(imp.desc_as(int)))
        elif imp.kind == ExternKind.TABLE:
            imports.append(head + table_type(imp.desc_as(TableType)))
        elif imp.kind == ExternKind.MEMORY:
            assert isinstance(imp.desc, MemoryType)
            imports.append(head + limits(imp.desc.limits))
        else:
            imports.append(head + global_type(imp.desc_as(GlobalType)))
    add(2, imports)
    add(3, [uleb(f.type_index) for f in m.funcs])
    add(4, [table_type(t) for t in m.tables])
    add(5, [limits(mem.limits) for mem in m.memories])
    add(6, [global_type(g.type) + expr(g.init) for g in m.globals])
    add(7, [name(e.name) + bytes([e.kind]) + uleb(e.index) for e in m.exports])
    if m.start is not None:
        out.append(_section(8, uleb(m.start)))
    add(9, [_elem(e) for e in m.elems])
    if m.data_count is not None:
        out.append(_section(12, uleb(len(m.datas))))
    add(10, [_code(f) for f in m.funcs])
    add(11, [_data(d) for d in m.datas])
    names = _names(m.names)
    if names:
        out.append(_section(0, name("name") + names))
    return b"".join(out)
