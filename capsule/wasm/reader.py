"""Decoding the WebAssembly binary format into a ``Module`` (no validation: see ``validate.py``).

The reader works in two passes so that errors can name their function: the first pass walks every section (in
the order and sizes the spec demands) and decodes everything except function bodies; then the ``name`` section
is known and the bodies are decoded, each error tagged with the function's index and name. Every decoding
problem is a ``MalformedError`` with the byte offset; use of a proposal capsule does not implement is an
``UnsupportedError``. Nothing else escapes: truncation is checked before each read, not caught as IndexError.
"""

from __future__ import annotations

from .errors import MalformedError, UnsupportedError, WasmError
from .module import (
    BlockType,
    BrTable,
    CustomSection,
    Data,
    Elem,
    Export,
    ExternKind,
    Function,
    FuncType,
    Global,
    GlobalType,
    Import,
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
from .opcodes import IMMEDIATE, UNSUPPORTED, Imm, Op

MAGIC = b"\0asm"
VERSION = b"\x01\0\0\0"
#: Implementation limit on locals per function (the spec allows up to 2**32 - 1; engines cap near 50,000).
MAX_LOCALS = 50_000

_VALTYPES = {int(t): t for t in ValType}
_GC_TYPE_BYTES = {0x63, 0x64, 0x65, 0x69, 0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x71, 0x72, 0x73, 0x74}
# Binary section id -> position in the required order (custom sections, id 0, may appear anywhere).
_SECTION_ORDER = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}
_SECTION_NAMES = {
    0: "custom",
    1: "type",
    2: "import",
    3: "function",
    4: "table",
    5: "memory",
    6: "global",
    7: "export",
    8: "start",
    9: "element",
    10: "code",
    11: "data",
    12: "data count",
}
# Opcode byte -> immediate kind, as a list for speed in the decoding loop (None: not a single-byte opcode).
_IMM_BY_BYTE: list[Imm | None] = [IMMEDIATE.get(b) if b not in (0xFC, 0xFE) else None for b in range(256)]


class _Reader:
    """A cursor over ``data[pos:end]`` with the binary format's primitive decoders."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def fail(self, message: str, offset: int | None = None) -> MalformedError:
        return MalformedError(message, self.pos if offset is None else offset)

    def at_end(self) -> bool:
        return self.pos >= self.end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise self.fail("unexpected end")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def bytes(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise self.fail(
                f"unexpected end: {n} bytes needed, {self.end - self.pos} left (length out of bounds)"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def _leb(self, bits: int, signed: bool) -> int:
        """LEB128 of at most ceil(bits/7) bytes; unused bits of the last byte must be 0 (or sign copies)."""
        start = self.pos
        result = shift = 0
        max_bytes = (bits + 6) // 7
        for i in range(max_bytes):
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                if i == max_bytes - 1:
                    used = bits - 7 * i  # value bits in the last byte
                    rest = b & 0x7F
                    if signed:
                        sign_and_unused = rest >> (used - 1)
                        if sign_and_unused not in (0, (1 << (8 - used)) - 1):
                            raise self.fail("integer too large", start)
                    elif rest >> used:
                        raise self.fail("integer too large", start)
                if signed and b & 0x40:
                    result -= 1 << shift
                return result
        raise self.fail("integer representation too long", start)

    def u32(self) -> int:
        data, pos = self.data, self.pos
        if pos < self.end and data[pos] < 0x80:  # fast path: one byte
            self.pos = pos + 1
            return data[pos]
        return self._leb(32, False)

    def s32(self) -> int:
        return self._leb(32, True)

    def s33(self) -> int:
        return self._leb(33, True)

    def s64(self) -> int:
        return self._leb(64, True)

    def count(self, min_size: int = 1) -> int:
        """A vector length; each element takes at least ``min_size`` bytes, so more is truncation."""
        start = self.pos
        n = self.u32()
        if n * min_size > self.end - self.pos:
            raise self.fail(
                f"length out of bounds: {n} elements in {self.end - self.pos} bytes (unexpected end)", start
            )
        return n

    def name(self) -> str:
        n = self.count()
        start = self.pos
        raw = self.bytes(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"malformed UTF-8 encoding: {e.reason}", start + e.start) from None

    def valtype(self) -> ValType:
        start = self.pos
        return _valtype(self.byte(), start)

    def reftype(self) -> ValType:
        start = self.pos
        t = _valtype(self.byte(), start)
        if not t.is_ref:
            raise self.fail(f"malformed reference type: {t}", start)
        return t

    def limits(self, memory: bool) -> Limits:
        start = self.pos
        flags = self.byte()
        if flags in (0x04, 0x05, 0x06, 0x07):
            raise UnsupportedError("memory64/table64 (64-bit limits)", start)
        if flags not in (0x00, 0x01) and not (memory and flags in (0x02, 0x03)):  # 0x02: shared (threads)
            raise self.fail(f"malformed limits flags {flags:#x}", start)
        lo = self.u32()
        return Limits(lo, self.u32() if flags & 1 else None, shared=bool(flags & 2))


def _valtype(b: int, offset: int) -> ValType:
    t = _VALTYPES.get(b)
    if t is not None:
        if t == ValType.V128:
            raise UnsupportedError("SIMD (v128 value type)", offset)
        return t
    if b in _GC_TYPE_BYTES:
        raise UnsupportedError(f"typed function references / GC (value type {b:#x})", offset)
    raise MalformedError(f"malformed value type {b:#x}", offset)


def read_module(data: bytes) -> Module:
    """Decode a binary module. Raises MalformedError or UnsupportedError; the result is not yet validated."""
    data = bytes(data)
    r = _Reader(data)
    if len(data) < 4 or data[:4] != MAGIC:
        raise MalformedError("magic header not detected", 0)
    if len(data) < 8:
        raise MalformedError("unexpected end: no version", 4)
    if data[4:8] != VERSION:
        raise MalformedError(f"unknown binary version {data[4:8].hex()}", 4)
    r.pos = 8
    m = Module()
    func_type_indices: list[int] = []
    code: _Reader | None = None
    code_offset = 0
    last = 0
    while not r.at_end():
        sec_start = r.pos
        sec_id = r.byte()
        if sec_id == 13:
            raise UnsupportedError("exception handling (tag section)", sec_start)
        if sec_id not in _SECTION_NAMES:
            raise r.fail(f"malformed section id {sec_id}", sec_start)
        size = r.u32()
        if size > r.end - r.pos:
            raise r.fail(
                f"{_SECTION_NAMES[sec_id]} section size {size} out of bounds (unexpected end)", sec_start
            )
        s = _Reader(data, r.pos, r.pos + size)
        r.pos += size
        if sec_id != 0:
            order = _SECTION_ORDER[sec_id]
            if order <= last:
                raise s.fail(
                    f"unexpected {_SECTION_NAMES[sec_id]} section (out of order or duplicate)", sec_start
                )
            last = order
        if sec_id == 0:
            name = s.name()
            m.customs.append(CustomSection(name, data[s.pos : s.end], s.pos))
            s.pos = s.end
        elif sec_id == 1:
            m.types = [_functype(s) for _ in range(s.count())]
        elif sec_id == 2:
            m.imports = [_import(s) for _ in range(s.count())]
        elif sec_id == 3:
            func_type_indices = [s.u32() for _ in range(s.count())]
        elif sec_id == 4:
            m.tables = [_table_type(s) for _ in range(s.count())]
        elif sec_id == 5:
            m.memories = [MemoryType(s.limits(True)) for _ in range(s.count())]
        elif sec_id == 6:
            m.globals = [_global(s, m) for _ in range(s.count())]
        elif sec_id == 7:
            m.exports = [_export(s) for _ in range(s.count())]
        elif sec_id == 8:
            m.start = s.u32()
        elif sec_id == 9:
            m.elems = [_elem(s, m) for _ in range(s.count())]
        elif sec_id == 12:
            m.data_count = s.u32()
        elif sec_id == 10:
            code, code_offset = _Reader(data, s.pos, s.end), sec_start
            s.pos = s.end  # bodies are decoded once the name section is known
        elif sec_id == 11:
            m.datas = [_data(s, m) for _ in range(s.count())]
            if m.data_count is not None and m.data_count != len(m.datas):
                raise s.fail(
                    f"data count and data section have inconsistent lengths "
                    f"({m.data_count} vs {len(m.datas)})",
                    sec_start,
                )
        if s.pos != s.end:
            raise s.fail(
                f"section size mismatch: {_SECTION_NAMES[sec_id]} section has {s.end - s.pos} unread bytes"
            )
    if m.data_count is not None and m.data_count and not m.datas:
        raise MalformedError(
            f"data count and data section have inconsistent lengths ({m.data_count} vs 0)", r.pos
        )
    m.names = _names(m)
    if code is None:
        if func_type_indices:
            raise MalformedError(
                "function and code section have inconsistent lengths (no code section)", r.pos
            )
        return m
    _code_section(code, m, func_type_indices, code_offset)
    return m


def _functype(s: _Reader) -> FuncType:
    start = s.pos
    form = s.byte()
    if form in (0x4E, 0x4F, 0x50, 0x5E, 0x5F):
        raise UnsupportedError(f"GC type definitions (form {form:#x})", start)
    if form != 0x60:
        raise s.fail(f"malformed function type form {form:#x} (integer representation too long)", start)
    params = tuple(s.valtype() for _ in range(s.count()))
    results = tuple(s.valtype() for _ in range(s.count()))
    return FuncType(params, results)


def _table_type(s: _Reader) -> TableType:
    if s.pos < s.end and s.data[s.pos] == 0x40:
        raise UnsupportedError("typed function references (table with initializer)", s.pos)
    elem = s.reftype()
    return TableType(elem, s.limits(False))


def _global_type(s: _Reader) -> GlobalType:
    t = s.valtype()
    start = s.pos
    mut = s.byte()
    if mut not in (0, 1):
        raise s.fail(f"malformed mutability {mut:#x}", start)
    return GlobalType(t, bool(mut))


def _import(s: _Reader) -> Import:
    start = s.pos
    module, name = s.name(), s.name()
    kind_at = s.pos
    kind = s.byte()
    if kind == 0:
        return Import(module, name, ExternKind.FUNC, s.u32(), start)
    if kind == 1:
        return Import(module, name, ExternKind.TABLE, _table_type(s), start)
    if kind == 2:
        return Import(module, name, ExternKind.MEMORY, MemoryType(s.limits(True)), start)
    if kind == 3:
        return Import(module, name, ExternKind.GLOBAL, _global_type(s), start)
    if kind == 4:
        raise UnsupportedError("exception handling (tag import)", kind_at)
    raise s.fail(f"malformed import kind {kind:#x}", kind_at)


def _export(s: _Reader) -> Export:
    start = s.pos
    name = s.name()
    kind_at = s.pos
    kind = s.byte()
    if kind == 4:
        raise UnsupportedError("exception handling (tag export)", kind_at)
    if kind > 3:
        raise s.fail(f"malformed export kind {kind:#x}", kind_at)
    return Export(name, ExternKind(kind), s.u32(), start)


def _global(s: _Reader, m: Module) -> Global:
    start = s.pos
    gt = _global_type(s)
    return Global(gt, _expr(s, m), start)


def _elem(s: _Reader, m: Module) -> Elem:
    start = s.pos
    flags = s.u32()
    if flags > 7:
        raise s.fail(f"malformed elements segment kind {flags}", start)
    mode = SegmentMode.PASSIVE if flags & 1 else SegmentMode.ACTIVE
    if flags & 3 == 3:
        mode = SegmentMode.DECLARATIVE
    table, offset_expr = 0, None
    if mode == SegmentMode.ACTIVE:
        if flags & 2:
            table = s.u32()
        offset_expr = _expr(s, m)
    uses_exprs = bool(flags & 4)
    if flags & 3:  # an explicit element kind (flags & 4 clear) or reference type (set) follows
        if uses_exprs:
            etype = s.reftype()
        else:
            at = s.pos
            kind = s.byte()
            if kind != 0:
                raise s.fail(f"malformed element kind {kind:#x}", at)
            etype = ValType.FUNCREF
    else:
        etype = ValType.FUNCREF
    if uses_exprs:
        items = [_expr(s, m) for _ in range(s.count())]
    else:
        items = []
        for _ in range(s.count()):
            at = s.pos
            items.append([Instr(Op.REF_FUNC, s.u32(), at), Instr(Op.END, None, at)])
    return Elem(mode, etype, items, table, offset_expr, start)


def _data(s: _Reader, m: Module) -> Data:
    start = s.pos
    flags = s.u32()
    if flags == 1:
        return Data(SegmentMode.PASSIVE, s.bytes(s.count(0)), 0, None, start)
    if flags not in (0, 2):
        raise s.fail(f"malformed data segment kind {flags}", start)
    memory = s.u32() if flags == 2 else 0
    offset_expr = _expr(s, m)
    return Data(SegmentMode.ACTIVE, s.bytes(s.count(0)), memory, offset_expr, start)


def _names(m: Module) -> Names:
    """The ``name`` custom section, decoded leniently: a broken one is ignored (it never affects validity)."""
    names = Names()
    for sec in m.custom("name"):
        s = _Reader(sec.data)
        try:
            while not s.at_end():
                sub, size = s.byte(), s.u32()
                if size > s.end - s.pos:  # a subsection running past its section (found by capsule fuzz)
                    raise s.fail(f"name subsection size {size} out of bounds", s.pos)
                sub_r = _Reader(sec.data, s.pos, s.pos + size)
                s.pos += size
                if sub == 0:
                    names.module = sub_r.name()
                elif sub == 1:
                    for _ in range(sub_r.count()):
                        idx = sub_r.u32()
                        names.funcs[idx] = sub_r.name()
                elif sub == 2:
                    for _ in range(sub_r.count()):
                        func = sub_r.u32()
                        local_names = names.locals.setdefault(func, {})
                        for _ in range(sub_r.count()):
                            idx = sub_r.u32()
                            local_names[idx] = sub_r.name()
                elif sub == 7:  # global names (extended name section; wasm-ld writes them)
                    for _ in range(sub_r.count()):
                        idx = sub_r.u32()
                        names.globals[idx] = sub_r.name()
        except WasmError:
            return Names()
    return names


def _code_section(s: _Reader, m: Module, func_type_indices: list[int], section_offset: int) -> None:
    n = s.count()
    if n != len(func_type_indices):
        raise s.fail(
            f"function and code section have inconsistent lengths ({len(func_type_indices)} vs {n})",
            section_offset,
        )
    base = m.num_imported_funcs
    for i, type_index in enumerate(func_type_indices):
        try:
            params = m.types[type_index].params if type_index < len(m.types) else ()
            m.funcs.append(_body(s, m, type_index, params))
        except WasmError as e:
            if e.func is None:
                e.func, e.func_name = base + i, m.names.funcs.get(base + i)
            raise
    if s.pos != s.end:
        raise s.fail("section size mismatch: code section has unread bytes")


def _body(s: _Reader, m: Module, type_index: int, params: tuple[ValType, ...]) -> Function:
    start = s.pos
    size = s.u32()
    if size > s.end - s.pos:
        raise s.fail(
            f"function body size {size} out of bounds (unexpected end of section or function)", start
        )
    b = _Reader(s.data, s.pos, s.pos + size)
    s.pos += size
    groups: list[tuple[int, ValType]] = []
    total = 0
    for _ in range(b.count(2)):
        at = b.pos
        n = b.u32()
        groups.append((n, b.valtype()))
        total += n
        if total > 0xFFFF_FFFF:
            raise b.fail("too many locals", at)
    if total > MAX_LOCALS:
        raise UnsupportedError(f"{total} locals in one function (capsule's limit is {MAX_LOCALS})", start)
    local_types = list(params)
    for n, t in groups:
        local_types.extend([t] * n)
    body = _expr(b, m)
    if b.pos != b.end:
        raise b.fail("section size mismatch: bytes after the function's final end")
    return Function(type_index, tuple(local_types), len(params), body, start, size)


def _blocktype(r: _Reader) -> BlockType:
    at = r.pos
    b = r.byte()
    if b == 0x40:
        return BlockType()
    if b & 0xC0 == 0x40:  # a one-byte negative s33: a value type
        return BlockType(result=_valtype(b, at))
    r.pos = at
    x = r.s33()
    if x < 0:
        raise r.fail(f"malformed block type {x}", at)
    return BlockType(type_index=x)


def _expr(r: _Reader, m: Module) -> list[Instr]:
    """Decode instructions up to the ``end`` that closes the expression, matching blocks as it goes."""
    data = r.data
    body: list[Instr] = []
    append = body.append
    open_blocks: list[int] = []
    imm_by_byte = _IMM_BY_BYTE
    while True:
        at = r.pos
        if at >= r.end:
            raise r.fail("unexpected end of section or function (END opcode expected)")
        code = data[at]
        r.pos = at + 1
        kind = imm_by_byte[code]
        if kind is None:
            if code in (0xFC, 0xFE):
                prefix = code
                sub = r.u32()
                code = prefix << 8 | sub if sub <= 0xFF else -1
                kind = IMMEDIATE.get(code)
                if kind is None:
                    if prefix == 0xFC and 0x12 <= sub <= 0x13:
                        raise UnsupportedError("memory64/wide arithmetic (0xfc prefix)", at)
                    raise r.fail(f"illegal opcode {prefix:#x} {sub:#x}", at)
            elif code in UNSUPPORTED:
                raise UnsupportedError(UNSUPPORTED[code], at)
            else:
                raise r.fail(f"illegal opcode {code:#04x}", at)
        imm: object  # what Instr.imm holds for this kind (see opcodes.Imm)
        if kind is Imm.NONE:
            imm = None
        elif kind is Imm.LOCAL or kind is Imm.GLOBAL or kind is Imm.LABEL or kind is Imm.FUNC:
            imm = r.u32()
        elif kind is Imm.I32:
            imm = r.s32()
        elif kind is Imm.MEMARG:
            imm = _memarg(r)
        elif kind is Imm.BLOCK:
            imm = _blocktype(r)
        elif kind is Imm.I64:
            imm = r.s64()
        elif kind is Imm.F32:
            imm = int.from_bytes(r.bytes(4), "little")
        elif kind is Imm.F64:
            imm = int.from_bytes(r.bytes(8), "little")
        elif kind is Imm.BR_TABLE:
            labels = tuple(r.u32() for _ in range(r.count()))
            imm = BrTable(labels, r.u32())
        elif kind is Imm.CALL_INDIRECT or kind is Imm.ELEM_TABLE or kind is Imm.TABLE_TABLE:
            imm = (r.u32(), r.u32())
        elif kind is Imm.TABLE or kind is Imm.ELEM:
            imm = r.u32()
        elif kind is Imm.MEMORY:
            imm = _memory_index(r)
        elif kind is Imm.MEMORY_MEMORY:
            imm = (_memory_index(r), _memory_index(r))
        elif kind is Imm.DATA or kind is Imm.DATA_MEMORY:
            if m.data_count is None:
                raise r.fail("data count section required (memory.init/data.drop without one)", at)
            imm = r.u32()
            if kind is Imm.DATA_MEMORY:
                imm = (imm, _memory_index(r))
        elif kind is Imm.SELECT_T:
            imm = tuple(r.valtype() for _ in range(r.count()))
        elif kind is Imm.REFTYPE:
            t_at = r.pos
            t = r.byte()
            if t not in (0x70, 0x6F):
                _valtype(t, t_at)  # raises Unsupported for GC heap types
                raise r.fail(f"malformed reference type {t:#x}", t_at)
            imm = ValType(t)
        else:  # pragma: no cover - every Imm kind is handled above
            raise AssertionError(kind)
        index = len(body)
        append(Instr(code, imm, at))
        if code == 0x0B:  # end
            if not open_blocks:
                return body
            opener = body[open_blocks.pop()]
            opener.end = index
            if opener.else_ >= 0:
                body[opener.else_].end = index
        elif code <= 0x04 and code >= 0x02:  # block, loop, if
            open_blocks.append(index)
        elif code == 0x05:  # else
            if not open_blocks or body[open_blocks[-1]].op != 0x04 or body[open_blocks[-1]].else_ >= 0:
                raise r.fail("else without a matching if (END opcode expected)", at)
            body[open_blocks[-1]].else_ = index


def _memarg(r: _Reader) -> MemArg:
    at = r.pos
    align = r.u32()
    if align & 0x40:
        if _memory_index(r) != 0:
            raise UnsupportedError("multiple memories (memarg with memory index)", at)
        align &= ~0x40
    if align >= 0x40:
        raise r.fail(f"malformed memop flags {align:#x}", at)
    return MemArg(align, r.u32())


def _memory_index(r: _Reader) -> int:
    at = r.pos
    index = r.u32()
    if index != 0:
        raise UnsupportedError(f"multiple memories (memory index {index})", at)
    return index
