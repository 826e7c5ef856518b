"""Small compiled objects for the reliability tests, and ways to make them lie."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from capsule.bpf.elf_write import write_object
from capsule.bpf.spec import ObjectSpec
from capsule.compiler import abi, compile_module
from capsule.wasm import load
from tests.wasm.wasm_build import wat

# memory, an active data segment, a table with an active element segment, a global: every kind of write the
# host makes when it instantiates a module
TINY = """(module
  (memory 1 2)
  (data (i32.const 16) "hello")
  (table 2 funcref)
  (elem (i32.const 0) $f)
  (global $g (mut i32) (i32.const 7))
  (func $f (export "f") (result i32) (i32.load (i32.const 16)))
)"""
TINY_RESULT = int.from_bytes(b"hell", "little")


@cache
def _tiny() -> ObjectSpec:
    return compile_module(load(wat(TINY)))


def tiny() -> ObjectSpec:
    """A fresh copy of the tiny module's object, to change at will."""
    return copy.deepcopy(_tiny())


def meta_of(spec: ObjectSpec) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(spec.extra_sections[abi.META_SECTION])
    return data


def with_meta(spec: ObjectSpec, change: Callable[[dict[str, Any]], object]) -> ObjectSpec:
    """``spec`` with its ``.capsule.meta`` passed through ``change`` (which edits the parsed JSON in place)."""
    meta = meta_of(spec)
    change(meta)
    spec.extra_sections[abi.META_SECTION] = json.dumps(meta).encode()
    return spec


def written(spec: ObjectSpec, path: Path) -> Path:
    write_object(spec, path)
    return path
