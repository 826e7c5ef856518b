"""``.capsule.meta``: what the compiler tells the host about a compiled module, as typed records.

The compiler (``program.describe``) builds a ``Meta``; ``to_json`` writes it into the object's
``abi.META_SECTION``. The host (``capsule.runtime``) reads it back with ``from_json``, which checks everything
the host will rely on (types, required keys, indices in range, sizes, region ids) before a single value is used,
so a damaged or hand-edited object is refused with one ``MetaError`` naming the first wrong field instead of
failing somewhere inside instantiation. The JSON form is compact (``,``/``:`` separators) and versioned; any
change to it is a new ``META_VERSION``.

Constant expressions (global initialisers, segment offsets) are kept as the host evaluates them: a list of
``(opcode, immediate)`` pairs of the few instructions a constant expression may hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from capsule.wasm import ExternKind, Op, ValType

from . import abi
from .options import Options

META_VERSION = 1

ConstExpr = tuple[tuple[int, int | None], ...]
"""A constant expression: ``(opcode, immediate or None)`` pairs, evaluated by the host."""

#: opcodes a constant expression may hold: constants, global.get, references, extended-const arithmetic
CONST_PUSH = frozenset({Op.I32_CONST, Op.I64_CONST, Op.F32_CONST, Op.F64_CONST, Op.GLOBAL_GET, Op.REF_NULL,
                        Op.REF_FUNC})
CONST_ARITH = frozenset({Op.I32_ADD, Op.I64_ADD, Op.I32_SUB, Op.I64_SUB, Op.I32_MUL, Op.I64_MUL})
_VALTYPES = {str(t): t for t in ValType}


class MetaError(ValueError):
    """``.capsule.meta`` is not what this capsule writes; the message names the first field that is wrong."""


class MetaVersionError(MetaError):
    """The metadata is well-formed JSON of another version: the object needs rebuilding, it is not corrupt."""


@dataclass(frozen=True)
class BuildOptions:
    """The build options the host must follow (the rest of ``Options`` only shaped the code)."""

    checked: bool
    may_goto: bool
    fibers: int
    stack_size: int


@dataclass(frozen=True)
class Signature:
    params: tuple[ValType, ...]
    results: tuple[ValType, ...]


@dataclass(frozen=True)
class Function:
    name: str
    type: int  # index into Meta.types
    entry: int | None  # the entry region's id; None for an imported function


@dataclass(frozen=True)
class Import:
    module: str
    name: str
    kind: ExternKind


@dataclass(frozen=True)
class Global:
    """A global: imported (its value comes from the host) or defined with an initialiser."""

    type: ValType
    mutable: bool
    imported: tuple[str, str] | None = None  # (module, name)
    init: ConstExpr | None = None


@dataclass(frozen=True)
class Memory:
    initial: int  # wasm pages
    max: int  # wasm pages, at most abi.MAX_MEMORY_PAGES


@dataclass(frozen=True)
class Table:
    initial: int
    max: int | None


@dataclass(frozen=True)
class DataSegment:
    """A data segment's bytes are ``size`` bytes at ``at`` in ``abi.DATA_SECTION``; ``offset`` None: passive."""

    at: int
    size: int
    offset: ConstExpr | None


@dataclass(frozen=True)
class ElemSegment:
    """An active element segment (``offset`` None: passive, and nothing else of it is recorded). An item is a
    table value (function index + 1, 0 for null) or a constant expression giving one."""

    offset: ConstExpr | None
    table: int = 0
    items: tuple[int | ConstExpr, ...] = ()


@dataclass(frozen=True)
class Export:
    name: str
    kind: ExternKind
    index: int


@dataclass(frozen=True)
class Part:
    """One BPF program of an object split across several (``abi.program_name(k)``): the physical functions it
    owns beyond the ``shared`` ones every part holds (a state in one of them is handed to it), and where its
    code's wasm functions start (for naming the function a verifier rejection is in)."""

    own: tuple[int, int]  # [first, end) physical function
    code_ranges: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Meta:
    options: BuildOptions
    types: tuple[Signature, ...]
    funcs: tuple[Function, ...]  # imported functions first, as wasm numbers them
    imported_funcs: int
    imports: tuple[Import, ...]
    globals: tuple[Global, ...]
    stack_pointer_global: int | None  # the C shadow-stack pointer, which each fiber keeps its own copy of
    memory: Memory | None
    tables: tuple[Table, ...]
    data: tuple[DataSegment, ...]
    elems: tuple[ElemSegment, ...]
    exports: tuple[Export, ...]
    start: int | None
    regions: Mapping[int, int]  # region id -> the function it belongs to (for backtraces)
    frame_sizes: Mapping[int, int]  # function -> bytes of its software-stack frame
    code_ranges: tuple[tuple[int, int], ...] = ()  # (first BPF slot of its code, function), ascending
    # a split object: its programs (empty: one, ``abi.ENTRY_PROGRAM``, whose code_ranges are above)
    parts: tuple[Part, ...] = ()
    shared: int = 0  # physical functions every part holds

    def part_of(self, phys: int) -> int:
        """The program a state in physical function ``phys`` is best started in."""
        return next((k for k, p in enumerate(self.parts) if p.own[0] <= phys < p.own[1]), 0)

    def to_json(self) -> bytes:
        """The section's bytes (key order and separators are part of the format)."""
        o = self.options
        d = {
            "version": META_VERSION,
            "options": {"checked": o.checked, "may_goto": o.may_goto, "fibers": o.fibers,
                        "stack_size": o.stack_size},
            "types": [[[str(v) for v in t.params], [str(v) for v in t.results]] for t in self.types],
            "funcs": [{"name": f.name, "type": f.type, "entry": f.entry} for f in self.funcs],
            "imported_funcs": self.imported_funcs,
            "imports": [[x.module, x.name, int(x.kind)] for x in self.imports],
            "globals": [_global_json(g) for g in self.globals],
            "stack_pointer_global": self.stack_pointer_global,
            "memory": None if self.memory is None else {"initial": self.memory.initial, "max": self.memory.max},
            "tables": [{"initial": t.initial, "max": t.max} for t in self.tables],
            "data": [_data_json(s) for s in self.data],
            "elems": [_elem_json(e) for e in self.elems],
            "exports": [{"name": e.name, "kind": int(e.kind), "index": e.index} for e in self.exports],
            "start": self.start,
            "regions": {str(r): f for r, f in self.regions.items()},
            "frame_sizes": {str(f): n for f, n in self.frame_sizes.items()},
            "code_ranges": [[s, f] for s, f in self.code_ranges],
        }
        if self.parts:
            d["parts"] = {"shared": self.shared, "programs": [
                {"own": list(p.own), "code_ranges": [[s, f] for s, f in p.code_ranges]} for p in self.parts]}
        return json.dumps(d, separators=(",", ":")).encode()


def _expr_json(e: ConstExpr) -> list[list[int | None]]:
    return [[op, imm] for op, imm in e]


def _global_json(g: Global) -> dict[str, object]:
    out: dict[str, object] = {"type": str(g.type), "mutable": g.mutable}
    if g.imported is not None:
        out["import"] = list(g.imported)
    else:
        out["init"] = _expr_json(g.init or ())
    return out


def _data_json(s: DataSegment) -> dict[str, object]:
    if s.offset is None:
        return {"passive": True, "at": s.at, "size": s.size}
    return {"offset": _expr_json(s.offset), "at": s.at, "size": s.size}


def _elem_json(e: ElemSegment) -> dict[str, object]:
    if e.offset is None:
        return {"passive": True}
    items = [i if isinstance(i, int) else _expr_json(i) for i in e.items]
    return {"table": e.table, "offset": _expr_json(e.offset), "items": items}


# -- reading and checking ---------------------------------------------------------------------------------------

_KEYS = ("version", "options", "types", "funcs", "imported_funcs", "imports", "globals", "stack_pointer_global",
         "memory", "tables", "data", "elems", "exports", "start", "regions", "frame_sizes")
# added within version 1: an object built before still loads (its verifier rejections just name no function)
_LATER_KEYS = ("code_ranges", "parts")


def from_json(raw: bytes, *, data_size: int | None = None) -> Meta:
    """Parse and check the section; ``data_size`` is the length of ``abi.DATA_SECTION``, which the data
    segments must exactly cover. Raises ``MetaError`` (``MetaVersionError`` for another version)."""
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MetaError(f"not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise MetaError(f"expected a JSON object, got {_kind(d)}")
    if "version" in d:  # before anything else: another version may have other keys
        version = _int(d["version"], "version")
        if version != META_VERSION:
            raise MetaVersionError(f"object built for metadata version {version}, this capsule reads "
                                   f"{META_VERSION}: rebuild it")
    _keys(d, "", _KEYS, _LATER_KEYS)
    options = _options(d["options"])
    types = tuple(_signature(t, f"types[{k}]") for k, t in enumerate(_list(d["types"], "types")))
    imports = tuple(_import(x, f"imports[{k}]") for k, x in enumerate(_list(d["imports"], "imports")))
    n_imported = sum(1 for x in imports if x.kind == ExternKind.FUNC)
    imported_funcs = _int(d["imported_funcs"], "imported_funcs")
    if imported_funcs != n_imported:
        _fail("imported_funcs", f"{imported_funcs}, but {n_imported} functions are imported")
    raw_funcs = _list(d["funcs"], "funcs")
    if not imported_funcs <= len(raw_funcs) <= abi.MAX_FUNCS:
        _fail("funcs", f"{len(raw_funcs)} functions ({imported_funcs} imported, at most {abi.MAX_FUNCS})")
    nfuncs = len(raw_funcs)
    regions = _int_map(d["regions"], "regions", lambda f, p: _index(f, p, nfuncs, "function", lo=imported_funcs),
                       key_below=abi.SPECIAL_BASE)
    funcs = tuple(_function(f, f"funcs[{k}]", len(types), regions, imported=k < imported_funcs)
                  for k, f in enumerate(raw_funcs))
    globals_ = _globals(d["globals"], nfuncs)
    ng = len(globals_)
    memory = None if d["memory"] is None else _memory(d["memory"])
    tables = tuple(_table(t, f"tables[{k}]") for k, t in enumerate(_list(d["tables"], "tables")))
    if len(tables) > abi.MAX_TABLES:
        _fail("tables", f"{len(tables)} tables (at most {abi.MAX_TABLES})")
    data = _data(d["data"], ng, nfuncs, data_size)
    elems = tuple(_elem(e, f"elems[{k}]", len(tables), ng, nfuncs) for k, e in enumerate(_list(d["elems"], "elems")))
    counts = {ExternKind.FUNC: nfuncs, ExternKind.TABLE: len(tables), ExternKind.MEMORY: int(memory is not None),
              ExternKind.GLOBAL: ng}
    exports = tuple(_export(e, f"exports[{k}]", counts) for k, e in enumerate(_list(d["exports"], "exports")))
    return Meta(
        options=options, types=types, funcs=funcs, imported_funcs=imported_funcs, imports=imports,
        globals=globals_,
        stack_pointer_global=_optional_index(d["stack_pointer_global"], "stack_pointer_global", ng, "global"),
        memory=memory, tables=tables, data=data, elems=elems, exports=exports,
        start=_optional_index(d["start"], "start", nfuncs, "function"),
        regions=regions,
        frame_sizes=_int_map(d["frame_sizes"], "frame_sizes", lambda n, p: _int(n, p), key_below=nfuncs),
        code_ranges=_code_ranges(d.get("code_ranges", []), nfuncs),
        **_parts(d.get("parts"), nfuncs, regions),
    )


def _parts(v: object, nfuncs: int, regions: Mapping[int, int]) -> dict[str, Any]:
    """The programs of a split object: their ranges must follow one another from ``shared`` on and cover every
    physical function a region id names."""
    if v is None:
        return {}
    d = _keys(v, "parts", ("shared", "programs"))
    shared = _int(d["shared"], "parts.shared", hi=abi.MAX_PHYS)
    parts = []
    at = shared
    for k, item in enumerate(_list(d["programs"], "parts.programs")):
        path = f"parts.programs[{k}]"
        p = _keys(item, path, ("own", "code_ranges"))
        own = _list(p["own"], f"{path}.own")
        if len(own) != 2:
            _fail(f"{path}.own", "expected [first, end]")
        lo = _int(own[0], f"{path}.own[0]", lo=at, hi=at)
        hi = _int(own[1], f"{path}.own[1]", lo=lo, hi=abi.MAX_PHYS + 1)
        parts.append(Part((lo, hi), _code_ranges(p["code_ranges"], nfuncs)))
        at = hi
    if not 1 <= len(parts) <= abi.MAX_PROGRAMS:
        _fail("parts.programs", f"{len(parts)} programs (1 to {abi.MAX_PROGRAMS})")
    beyond = sorted({r & abi.MAX_PHYS for r in regions if r & abi.MAX_PHYS >= at})
    if beyond:
        _fail("parts", f"physical function {beyond[0]} is in no program")
    return {"parts": tuple(parts), "shared": shared}


def _options(v: object) -> BuildOptions:
    d = _keys(v, "options", ("checked", "may_goto", "fibers", "stack_size"))
    o = BuildOptions(_bool(d["checked"], "options.checked"), _bool(d["may_goto"], "options.may_goto"),
                     _int(d["fibers"], "options.fibers"), _int(d["stack_size"], "options.stack_size"))
    try:  # the same rules as a build's: a stack layout the window cannot hold is refused here too
        Options(checked=o.checked, may_goto=o.may_goto, fibers=o.fibers, stack_size=o.stack_size)
    except ValueError as e:
        _fail("options", str(e))
    return o


def _signature(v: object, path: str) -> Signature:
    pair = _list(v, path)
    if len(pair) != 2:
        _fail(path, "expected [params, results]")

    def types(j: int) -> tuple[ValType, ...]:
        return tuple(_valtype(t, f"{path}[{j}][{k}]") for k, t in enumerate(_list(pair[j], f"{path}[{j}]")))

    return Signature(types(0), types(1))


def _import(v: object, path: str) -> Import:
    x = _list(v, path)
    if len(x) != 3:
        _fail(path, "expected [module, name, kind]")
    kind = _int(x[2], f"{path}[2]", hi=max(ExternKind))
    return Import(_str(x[0], f"{path}[0]"), _str(x[1], f"{path}[1]"), ExternKind(kind))


def _function(v: object, path: str, ntypes: int, regions: Mapping[int, int], *, imported: bool) -> Function:
    d = _keys(v, path, ("name", "type", "entry"))
    entry = None
    if imported and d["entry"] is not None:
        _fail(f"{path}.entry", "an imported function has no entry region")
    if not imported:
        entry = _int(d["entry"], f"{path}.entry")
        if entry not in regions:
            _fail(f"{path}.entry", f"{entry} is not a region id of this object")
    return Function(_str(d["name"], f"{path}.name"), _index(d["type"], f"{path}.type", ntypes, "type"), entry)


def _globals(v: object, nfuncs: int) -> tuple[Global, ...]:
    items = _list(v, "globals")
    if len(items) > abi.MAX_GLOBALS:
        _fail("globals", f"{len(items)} globals (at most {abi.MAX_GLOBALS})")
    out: list[Global] = []
    for g, item in enumerate(items):
        path = f"globals[{g}]"
        d = _keys(item, path, ("type", "mutable"), ("import", "init"))
        if ("import" in d) == ("init" in d):
            _fail(path, "expected exactly one of 'import' and 'init'")
        t, mut = _valtype(d["type"], f"{path}.type"), _bool(d["mutable"], f"{path}.mutable")
        if "import" in d:
            if out and out[-1].imported is None:
                _fail(path, "an imported global after a defined one")
            name = _list(d["import"], f"{path}.import")
            if len(name) != 2:
                _fail(f"{path}.import", "expected [module, name]")
            module, field = (_str(name[j], f"{path}.import[{j}]") for j in (0, 1))
            out.append(Global(t, mut, imported=(module, field)))
        else:  # an initialiser sees only the globals before it
            out.append(Global(t, mut, init=_expr(d["init"], f"{path}.init", g, nfuncs)))
    return tuple(out)


def _memory(v: object) -> Memory:
    d = _keys(v, "memory", ("initial", "max"))
    top = _int(d["max"], "memory.max", hi=abi.MAX_MEMORY_PAGES)
    return Memory(_int(d["initial"], "memory.initial", hi=top), top)


def _table(v: object, path: str) -> Table:
    d = _keys(v, path, ("initial", "max"))
    top = None if d["max"] is None else _int(d["max"], f"{path}.max")
    limit = abi.MAX_TABLE_ELEMS if top is None else min(top, abi.MAX_TABLE_ELEMS)
    return Table(_int(d["initial"], f"{path}.initial", hi=limit), top)


def _data(v: object, nglobals: int, nfuncs: int, data_size: int | None) -> tuple[DataSegment, ...]:
    out = []
    at = 0  # the segments' bytes follow each other in the data section
    for k, item in enumerate(_list(v, "data")):
        path = f"data[{k}]"
        passive = isinstance(item, dict) and "passive" in item
        d = _keys(item, path, ("passive" if passive else "offset", "at", "size"))
        if passive and d["passive"] is not True:
            _fail(f"{path}.passive", "expected true")
        seg = DataSegment(_int(d["at"], f"{path}.at"), _int(d["size"], f"{path}.size"),
                          None if passive else _expr(d["offset"], f"{path}.offset", nglobals, nfuncs))
        if seg.at != at:
            _fail(f"{path}.at", f"{seg.at}, but the segment's bytes start at {at} of the data section")
        at += seg.size
        out.append(seg)
    if data_size is not None and at != data_size:
        _fail("data", f"the segments hold {at} bytes, the data section {data_size}")
    return tuple(out)


def _elem(v: object, path: str, ntables: int, nglobals: int, nfuncs: int) -> ElemSegment:
    if isinstance(v, dict) and "passive" in v:
        d = _keys(v, path, ("passive",))
        if d["passive"] is not True:
            _fail(f"{path}.passive", "expected true")
        return ElemSegment(None)
    d = _keys(v, path, ("table", "offset", "items"))
    items: list[int | ConstExpr] = []
    for k, item in enumerate(_list(d["items"], f"{path}.items")):
        ipath = f"{path}.items[{k}]"
        items.append(_int(item, ipath, hi=nfuncs) if not isinstance(item, list)
                     else _expr(item, ipath, nglobals, nfuncs))
    return ElemSegment(_expr(d["offset"], f"{path}.offset", nglobals, nfuncs),
                       _index(d["table"], f"{path}.table", ntables, "table"), tuple(items))


def _export(v: object, path: str, counts: Mapping[ExternKind, int]) -> Export:
    d = _keys(v, path, ("name", "kind", "index"))
    kind = ExternKind(_int(d["kind"], f"{path}.kind", hi=max(ExternKind)))
    index = _index(d["index"], f"{path}.index", counts[kind], kind.name.lower())
    return Export(_str(d["name"], f"{path}.name"), kind, index)


def _code_ranges(v: object, nfuncs: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for k, item in enumerate(_list(v, "code_ranges")):
        path = f"code_ranges[{k}]"
        pair = _list(item, path)
        if len(pair) != 2:
            _fail(path, "expected [slot, function]")
        slot = _int(pair[0], f"{path}[0]", lo=out[-1][0] if out else 0)
        out.append((slot, _index(pair[1], f"{path}[1]", nfuncs, "function")))
    return tuple(out)


def _expr(v: object, path: str, nglobals: int, nfuncs: int) -> ConstExpr:
    """A constant expression that leaves one value; ``global.get`` may name the first ``nglobals`` globals."""
    out: list[tuple[int, int | None]] = []
    depth = 0
    for k, item in enumerate(_list(v, path)):
        ipath = f"{path}[{k}]"
        pair = _list(item, ipath)
        if len(pair) != 2:
            _fail(ipath, "expected [opcode, immediate]")
        op = _int(pair[0], f"{ipath}[0]")
        if op in CONST_ARITH:
            if pair[1] is not None:
                _fail(f"{ipath}[1]", "expected null")
            if depth < 2:
                _fail(ipath, "an operator without its two operands")
            out.append((op, None))
            depth -= 1
            continue
        if op not in CONST_PUSH:
            _fail(f"{ipath}[0]", f"opcode {op:#x} is not allowed in a constant expression")
        imm = _int(pair[1], f"{ipath}[1]", lo=-(1 << 63), hi=(1 << 64) - 1)
        if op == Op.GLOBAL_GET:
            _index(imm, f"{ipath}[1]", nglobals, "global")
        elif op == Op.REF_FUNC:
            _index(imm, f"{ipath}[1]", nfuncs, "function")
        out.append((op, imm))
        depth += 1
    if depth != 1:
        _fail(path, f"a constant expression must leave one value, this one leaves {depth}")
    return tuple(out)


# -- JSON shape checks ------------------------------------------------------------------------------------------

def _fail(path: str, what: str) -> NoReturn:
    raise MetaError(f"{path}: {what}" if path else what)


def _kind(v: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _keys(v: object, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, object]:
    if not isinstance(v, dict):
        _fail(path, f"expected an object, got {_kind(v)}")
    for k in required:
        if k not in v:
            _fail(path, f"missing key {k!r}")
    for k in v:
        if k not in required and k not in optional:
            _fail(path, f"unknown key {k!r}")
    return v


def _list(v: object, path: str) -> list[object]:
    if not isinstance(v, list):
        _fail(path, f"expected a list, got {_kind(v)}")
    return v


def _int(v: object, path: str, *, lo: int = 0, hi: int | None = None) -> int:
    if type(v) is not int:  # not bool, which is an int to Python but not to JSON
        _fail(path, f"expected an integer, got {_kind(v)}")
    if v < lo or (hi is not None and v > hi):
        _fail(path, f"{v} is out of range ({lo}..{hi})" if hi is not None else f"{v} is below {lo}")
    return v


def _index(v: object, path: str, count: int, what: str, *, lo: int = 0) -> int:
    i = _int(v, path)
    if not lo <= i < count:
        _fail(path, f"{i} is not a {what} index of this module ({lo}..{count - 1})" if count > lo
              else f"{i} is not a {what} index: this module has none")
    return i


def _optional_index(v: object, path: str, count: int, what: str) -> int | None:
    return None if v is None else _index(v, path, count, what)


def _bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        _fail(path, f"expected true or false, got {_kind(v)}")
    return v


def _str(v: object, path: str) -> str:
    if not isinstance(v, str):
        _fail(path, f"expected a string, got {_kind(v)}")
    return v


def _valtype(v: object, path: str) -> ValType:
    t = _VALTYPES.get(_str(v, path))
    if t is None:
        _fail(path, f"{v!r} is not a value type")
    return t


def _int_map(v: object, path: str, value: Callable[[object, str], int], *, key_below: int) -> dict[int, int]:
    """An object whose keys are decimal integers below ``key_below``; ``value(v, path)`` checks each value."""
    if not isinstance(v, dict):
        _fail(path, f"expected an object, got {_kind(v)}")
    out: dict[int, int] = {}
    for k, item in v.items():
        if not (k.isascii() and k.isdigit()) or int(k) >= key_below or str(int(k)) != k:
            _fail(path, f"key {k!r} is not a number below {key_below}")
        out[int(k)] = value(item, f"{path}[{k}]")
    return out
