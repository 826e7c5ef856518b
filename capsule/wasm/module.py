"""The data model of a decoded WebAssembly module, shaped for the compiler that consumes it.

Everything is a plain dataclass. Function bodies are decoded once into a flat list of ``Instr`` (opcode,
immediate, absolute byte offset), and the block structure is precomputed: every ``block``/``loop``/``if``
knows the index of its matching ``end`` (and an ``if`` the index of its ``else``), so a code generator can
walk or jump around a body without re-parsing it. Index spaces follow the spec: imported functions, tables,
memories and globals come first, then the module's own; the ``Module`` helpers (``func_type``,
``global_type``, ...) work on the whole index space so callers never add the import count by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import TypeVar

_T = TypeVar("_T")


class ValType(IntEnum):
    """Value types, valued by their binary encoding."""

    I32 = 0x7F
    I64 = 0x7E
    F32 = 0x7D
    F64 = 0x7C
    V128 = 0x7B
    FUNCREF = 0x70
    EXTERNREF = 0x6F

    def __str__(self) -> str:
        return self.name.lower()

    @property
    def is_ref(self) -> bool:
        return self in (ValType.FUNCREF, ValType.EXTERNREF)

    @property
    def is_num(self) -> bool:
        return self in (ValType.I32, ValType.I64, ValType.F32, ValType.F64)


class ExternKind(IntEnum):
    """What an import or export refers to, valued by its binary encoding."""

    FUNC = 0
    TABLE = 1
    MEMORY = 2
    GLOBAL = 3

    def __str__(self) -> str:
        return self.name.lower()


class SegmentMode(Enum):
    """How an element or data segment is used: copied at instantiation, on demand, or only declared."""

    ACTIVE = "active"
    PASSIVE = "passive"
    DECLARATIVE = "declarative"


@dataclass(frozen=True)
class FuncType:
    params: tuple[ValType, ...]
    results: tuple[ValType, ...]

    def __str__(self) -> str:
        return f"[{' '.join(map(str, self.params))}] -> [{' '.join(map(str, self.results))}]"


@dataclass(frozen=True)
class Limits:
    """Sizes in pages (memories) or elements (tables); ``max`` is None when unbounded."""

    min: int
    max: int | None = None


@dataclass(frozen=True)
class TableType:
    elem: ValType
    limits: Limits


@dataclass(frozen=True)
class MemoryType:
    limits: Limits


@dataclass(frozen=True)
class GlobalType:
    type: ValType
    mutable: bool


@dataclass(frozen=True)
class BlockType:
    """A block's type: ``[] -> []``, ``[] -> [t]``, or a type index (multi-value: params and results)."""

    result: ValType | None = None
    type_index: int | None = None


@dataclass(frozen=True)
class MemArg:
    """Alignment exponent (log2 bytes, a hint) and constant byte offset of a load or store."""

    align: int
    offset: int


@dataclass(frozen=True)
class BrTable:
    labels: tuple[int, ...]
    default: int


@dataclass(slots=True)
class Instr:
    """One decoded instruction.

    ``op`` is an ``opcodes.Op`` value, ``imm`` its immediate (see ``opcodes.Imm`` for what each kind holds),
    ``offset`` the absolute byte offset of the opcode in the module. For ``block``/``loop``/``if``/``else``,
    ``end`` is the index (in the same body) of the matching ``end``; for ``if``, ``else_`` is the index of its
    ``else`` or -1.
    """

    op: int
    imm: object = None
    offset: int = 0
    end: int = -1
    else_: int = -1

    def __repr__(self) -> str:
        from .opcodes import op_name

        extra = f" end={self.end}" if self.end >= 0 else ""
        extra += f" else={self.else_}" if self.else_ >= 0 else ""
        imm = "" if self.imm is None else f" {self.imm!r}"
        return f"<{op_name(self.op)}{imm} @{self.offset:#x}{extra}>"

    def imm_as(self, kind: type[_T]) -> _T:
        """``imm`` as the type its opcode's ``Imm`` kind gives it (``int`` for indices and constants, ``MemArg``,
        ``BlockType`` ...): the reader guarantees the type, this tells it to a type checker."""
        imm = self.imm
        assert isinstance(imm, kind), self
        return imm

    def imm_pair(self) -> tuple[int, int]:
        """``imm`` of the kinds that are two indices (``CALL_INDIRECT``, ``DATA_MEMORY``, ``ELEM_TABLE`` ...)."""
        imm = self.imm
        assert isinstance(imm, tuple) and len(imm) == 2, self
        return imm


@dataclass
class Import:
    module: str
    name: str
    kind: ExternKind
    #: FUNC: type index (int); TABLE: TableType; MEMORY: MemoryType; GLOBAL: GlobalType.
    desc: int | TableType | MemoryType | GlobalType
    offset: int = 0

    def desc_as(self, kind: type[_T]) -> _T:
        """``desc`` as the type ``kind`` gives it (``int`` for a function): the reader guarantees the type."""
        desc = self.desc
        assert isinstance(desc, kind), self
        return desc


@dataclass
class Export:
    name: str
    kind: ExternKind
    index: int
    offset: int = 0


@dataclass
class Global:
    type: GlobalType
    init: list[Instr]  # a constant expression, ending with ``end``
    offset: int = 0


@dataclass
class Function:
    """A function defined in the module (not imported)."""

    type_index: int
    #: Types of all locals, parameters first: ``local.get i`` reads a value of type ``locals[i]``.
    locals: tuple[ValType, ...]
    num_params: int
    body: list[Instr]
    offset: int = 0  # of the body's first byte (its size field)
    size: int = 0  # of the body in bytes, excluding the size field


@dataclass
class Elem:
    """An element segment; ``items`` are constant expressions (``ref.func x`` or ``ref.null t``, ``end``)."""

    mode: SegmentMode
    type: ValType
    items: list[list[Instr]]
    table: int = 0
    offset_expr: list[Instr] | None = None  # active segments only
    offset: int = 0

    def func_indices(self) -> list[int | None]:
        """The function index of every item (None for ``ref.null``); other items are an error."""
        from .opcodes import Op

        out: list[int | None] = []
        for expr in self.items:
            first = expr[0]
            if first.op == Op.REF_FUNC:
                out.append(first.imm_as(int))
            elif first.op == Op.REF_NULL:
                out.append(None)
            else:
                raise ValueError(f"element item is not ref.func/ref.null: {expr!r}")
        return out


@dataclass
class Data:
    mode: SegmentMode  # ACTIVE or PASSIVE
    init: bytes
    memory: int = 0
    offset_expr: list[Instr] | None = None  # active segments only
    offset: int = 0


@dataclass
class CustomSection:
    name: str
    data: bytes
    offset: int = 0  # of the section's contents (after the name)


@dataclass
class Names:
    """The ``name`` custom section, kept for diagnostics."""

    module: str | None = None
    funcs: dict[int, str] = field(default_factory=dict)
    locals: dict[int, dict[int, str]] = field(default_factory=dict)
    globals: dict[int, str] = field(default_factory=dict)


@dataclass
class Module:
    types: list[FuncType] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    funcs: list[Function] = field(default_factory=list)
    tables: list[TableType] = field(default_factory=list)  # defined tables only
    memories: list[MemoryType] = field(default_factory=list)  # defined memories only
    globals: list[Global] = field(default_factory=list)  # defined globals only
    exports: list[Export] = field(default_factory=list)
    start: int | None = None
    elems: list[Elem] = field(default_factory=list)
    datas: list[Data] = field(default_factory=list)
    data_count: int | None = None
    customs: list[CustomSection] = field(default_factory=list)
    names: Names = field(default_factory=Names)

    # ---- index spaces (imports first) ----

    def _imported(self, kind: ExternKind) -> list[Import]:
        return [imp for imp in self.imports if imp.kind == kind]

    def _imported_descs(self, kind: ExternKind, desc: type[_T]) -> list[_T]:
        return [imp.desc_as(desc) for imp in self.imports if imp.kind == kind]

    @property
    def num_imported_funcs(self) -> int:
        return sum(1 for imp in self.imports if imp.kind == ExternKind.FUNC)

    @property
    def num_imported_globals(self) -> int:
        return sum(1 for imp in self.imports if imp.kind == ExternKind.GLOBAL)

    def func_type_indices(self) -> list[int]:
        """Type index of every function in the function index space."""
        return self._imported_descs(ExternKind.FUNC, int) + [f.type_index for f in self.funcs]

    def func_type(self, index: int) -> FuncType:
        imported = self._imported(ExternKind.FUNC)  # a few imports: cheaper than the whole index space
        if 0 <= index < len(imported):
            return self.types[imported[index].desc]  # type: ignore[index]
        return self.types[self.funcs[index - len(imported)].type_index]

    def all_tables(self) -> list[TableType]:
        return self._imported_descs(ExternKind.TABLE, TableType) + self.tables

    def all_memories(self) -> list[MemoryType]:
        return self._imported_descs(ExternKind.MEMORY, MemoryType) + self.memories

    def all_globals(self) -> list[GlobalType]:
        return self._imported_descs(ExternKind.GLOBAL, GlobalType) + [g.type for g in self.globals]

    def defined_func(self, index: int) -> Function | None:
        """The body of function ``index`` (function index space), or None for an imported function."""
        n = self.num_imported_funcs
        return self.funcs[index - n] if index >= n else None

    def func_name(self, index: int) -> str | None:
        """The function's name: from the name section, else from its import or first export, else None."""
        name = self.names.funcs.get(index)
        if name is not None:
            return name
        if index < self.num_imported_funcs:
            imp = self._imported(ExternKind.FUNC)[index]
            return f"{imp.module}.{imp.name}"
        for exp in self.exports:
            if exp.kind == ExternKind.FUNC and exp.index == index:
                return exp.name
        return None

    def local_name(self, func: int, local: int) -> str | None:
        return self.names.locals.get(func, {}).get(local)

    def export(self, name: str) -> Export | None:
        return next((e for e in self.exports if e.name == name), None)

    def custom(self, name: str) -> list[CustomSection]:
        return [c for c in self.customs if c.name == name]
