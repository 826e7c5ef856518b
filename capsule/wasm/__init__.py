"""capsule.wasm: the WebAssembly front end (binary reader and validator).

``load(data)`` gives a validated ``Module``: the first stage of the compiler pipeline. ``read_module`` only
decodes (MalformedError / UnsupportedError); ``validate`` only type-checks (InvalidError / UnsupportedError).
"""

from __future__ import annotations

from pathlib import Path

from .errors import InvalidError, MalformedError, UnsupportedError, WasmError
from .module import (
    VARS_SECTION,
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
from .opcodes import Imm, Op, op_name
from .reader import read_module
from .validate import validate


def load(source: bytes | bytearray | memoryview | str | Path) -> Module:
    """Read and validate a module from bytes or a file path."""
    data = Path(source).read_bytes() if isinstance(source, str | Path) else bytes(source)
    module = read_module(data)
    validate(module)
    return module


__all__ = [
    "BlockType",
    "BrTable",
    "CustomSection",
    "Data",
    "Elem",
    "Export",
    "ExternKind",
    "FuncType",
    "Function",
    "Global",
    "GlobalType",
    "Imm",
    "Import",
    "Instr",
    "InvalidError",
    "Limits",
    "MalformedError",
    "MemArg",
    "MemoryType",
    "Module",
    "Names",
    "Op",
    "SegmentMode",
    "TableType",
    "UnsupportedError",
    "VARS_SECTION",
    "ValType",
    "WasmError",
    "load",
    "op_name",
    "read_module",
    "validate",
]
