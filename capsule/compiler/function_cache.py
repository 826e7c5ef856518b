"""Lowered functions cached on disk by content, so that a rebuild lowers only the functions that changed.

A function's lowering reads its own body, locals and type, and the module-wide facts in ``ModuleInfo``: the
options, the signatures, globals, tables and memories, the packing plan, the leaf and direct-call sets. The
key is therefore two digests: the function's own (``function_digest``), and the *context*
(``context_digest``): every field of ``ModuleInfo`` (whatever a later change makes lowering read, it is in the
key), with the module reduced to everything but the function bodies and data segments, which lowering never
reads. Both are salted with a digest of the compiler's own source (``compiler_digest``): a changed compiler
misses every entry instead of reusing code lowered by an older one. When the plan moves functions between
physical functions, the context changes and every function is lowered again: a cache miss costs time, never
correctness.

An entry is the pickled ``LoweredFunction`` (taken right after lowering, before the program assembly patches
region ids into its instructions) and the soft-float library functions its lowering asked for. Entries live
under ``cache_dir("lowered")``, one file each, written whole; a file that cannot be read is a miss.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import pickle
from functools import cache
from pathlib import Path
from typing import Any

from capsule.bpf.insn import Insn
from capsule.files import write_whole
from capsule.toolchain.cache import cache_dir
from capsule.wasm.module import Function

from .code import Code, RegionKey
from .state import LoweredFunction, ModuleInfo

# the packages whose source decides what lowering produces
_SOURCES = ("compiler", "bpf", "wasm", "guest/softfloat")
_TOP = Path(__file__).resolve().parents[1]


@cache
def compiler_digest() -> str:
    """A digest of the source files lowering runs (capsule/compiler, bpf, wasm, the soft-float library)."""
    h = hashlib.sha256()
    for sub in _SOURCES:
        for path in sorted((_TOP / sub).rglob("*.py")):
            h.update(str(path.relative_to(_TOP)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update((_TOP / "ints.py").read_bytes())
    return h.hexdigest()


def _stable(obj: object) -> object:
    """``obj`` as nested tuples whose ``repr`` is the same in every process (sets sorted, dataclasses by
    field), for hashing."""
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__name__}.{obj.name}"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, *(_stable(getattr(obj, f.name)) for f in dataclasses.fields(obj)))
    if isinstance(obj, (set, frozenset)):
        return ("set", *sorted((_stable(x) for x in obj), key=repr))
    if isinstance(obj, dict):
        return ("dict", *((_stable(k), _stable(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(_stable(x) for x in obj)
    if isinstance(obj, range):
        return ("range", obj.start, obj.stop, obj.step)
    return obj


def context_digest(info: ModuleInfo) -> str:
    """The digest of everything module-wide that lowering one function may read."""
    m = info.module
    signatures = [(f.type_index, f.locals, f.num_params) for f in m.funcs]
    shape = dataclasses.replace(m, funcs=[], datas=[], customs=[])
    fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info) if f.name not in ("module",
                                                                                              "library_used")}
    text = repr((_stable(shape), signatures, _stable(fields)))
    return hashlib.sha256((compiler_digest() + text).encode()).hexdigest()


def function_digest(func: Function, index: int) -> str:
    """The digest of one function's own input: index, type, locals and body (byte offsets left out: only
    error messages use them, and a failing function is never cached)."""
    # pickled (C speed, exact: different bodies never pickle alike; equal ones that do not only miss)
    body = pickle.dumps([(i.op, i.imm, i.end, i.else_) for i in func.body], pickle.HIGHEST_PROTOCOL)
    head = repr((index, func.type_index, func.locals, func.num_params)).encode()
    return hashlib.sha256(head + b"\0" + body).hexdigest()


def _code_parts(code: Code) -> tuple[object, ...] | None:
    """``code`` as columns of plain values (pickled at C speed, a few times faster than an object per
    instruction), region fixups as instruction indices; None if a fixup names an instruction not in it."""
    insns = code.insns
    at = {id(i): k for k, i in enumerate(insns)}
    fixups = [(at.get(id(i)), key) for i, key in code.region_fixups]
    if any(k is None for k, _ in fixups):
        return None
    columns = ([i.code for i in insns], [i.dst for i in insns], [i.src for i in insns], [i.off for i in insns],
               [i.imm for i in insns], {k: (i.ref, i.sym) for k, i in enumerate(insns) if i.ref or i.sym})
    rest = {f.name: getattr(code, f.name) for f in dataclasses.fields(code)
            if f.name not in ("insns", "region_fixups")}
    return columns, fixups, rest


def _code_from_parts(columns: tuple[list[int], list[int], list[int], list[int], list[int],
                                    dict[int, tuple[str | None, str | None]]],
                     fixups: list[tuple[int, RegionKey]], rest: dict[str, object]) -> Code:
    codes, dsts, srcs, offs, imms, names = columns
    insns = [Insn(*fields) for fields in zip(codes, dsts, srcs, offs, imms, strict=True)]
    for k, (ref, sym) in names.items():
        insns[k].ref, insns[k].sym = ref, sym
    code = Code(insns=insns, region_fixups=[(insns[k], key) for k, key in fixups])
    for name, value in rest.items():
        setattr(code, name, value)
    return code


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: object) -> Any:  # the reduce tuple pickle expects, or NotImplemented
        if type(obj) is Code:
            parts = _code_parts(obj)
            if parts is not None:
                return _code_from_parts, parts
        return NotImplemented


def dumps(entry: tuple[LoweredFunction, set[str]]) -> bytes:
    """An entry pickled, its code in columns (``pickle.loads`` reads it)."""
    out = io.BytesIO()
    _Pickler(out, pickle.HIGHEST_PROTOCOL).dump(entry)
    return out.getvalue()


class FunctionCache:
    """Lowered functions of one module under one context, on disk."""

    def __init__(self, info: ModuleInfo, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_dir("lowered")
        self.context = context_digest(info)

    def _path(self, key: str) -> Path:
        name = hashlib.sha256((self.context + key).encode()).hexdigest()[:40]
        return self.root / name[:2] / f"{name}.pickle"

    def get(self, key: str) -> tuple[LoweredFunction, set[str]] | None:
        try:
            data = self._path(key).read_bytes()
            lowered, library = pickle.loads(data)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):
            return None
        if not isinstance(lowered, LoweredFunction):
            return None
        return lowered, library

    def put(self, key: str, pickled: bytes) -> None:
        """Store an entry already pickled (``dumps((lowered, library))``)."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(path, pickled)
        except OSError:  # a full or read-only cache only costs the next build time
            pass
