"""Validation rules, each shown on a small wat module (invalid ones assembled with wat2wasm --no-check)."""

from __future__ import annotations

import pytest
from wasm_build import wat

from capsule.wasm import InvalidError, Op, load, read_module, validate

VALID = {
    "polymorphic after unreachable": "(func (result i32) unreachable i32.add)",
    "polymorphic after br": "(func (result i32) (block (result i32) (br 0 (i32.const 1)) i64.add drop))",
    "polymorphic after return": "(func (result f64) (return (f64.const 1)) (f32.add) drop)",
    "select on unknown operands": "(func (result i32) unreachable select)",
    "br_table to same-arity labels": """(func (param i32) (result i32)
        (block $a (result i32) (block $b (result i32)
          (br_table $a $b $a (i32.const 7) (local.get 0)))))""",
    "br_table over unknown operands": """(func (result f64) (block (result f64) (block (result f32)
        unreachable (br_table 0 1 1 (i32.const 1))) drop (f64.const 0)))""",
    "multi-value block with params": """(type $t (func (param i32 i64) (result i64 i32)))
        (func (result i64 i32) (i32.const 1) (i64.const 2)
          (block (type $t) (param i32 i64) (result i64 i32) drop drop
            (i64.const 3) (i32.const 4)))
        (func (local i64))""",
    "loop label takes params": """(type $t (func (param i32) (result i32)))
        (func (param i32) (result i32) (i32.const 0)
          (loop (type $t) (param i32) (result i32) (local.get 0) (br_if 0) (i32.const 5) (i32.add)))""",
    "if with params and else": """(type $t (func (param i32) (result i32)))
        (func (param i32) (result i32) (i32.const 5) (local.get 0)
          (if (type $t) (param i32) (result i32)
            (then (i32.const 1) (i32.add)) (else (i32.const 2) (i32.mul))))""",
    "floats": """(func (param f32 f64) (result f64)
        (f64.add (f64.promote_f32 (f32.sqrt (local.get 0)))
                 (f64.copysign (local.get 1) (f64.const -0.0))))""",
    "sat conversions and sign extension": """(func (param f64) (result i64)
        (i64.extend32_s (i64.trunc_sat_f64_u (local.get 0))))""",
    "references and tables": """(table $t 2 funcref) (table $e 1 externref) (elem declare func $f)
        (func $f (param externref) (result i32)
          (table.set $t (i32.const 0) (ref.func $f))
          (drop (table.grow $e (local.get 0) (i32.const 1)))
          (table.fill $t (i32.const 0) (ref.null func) (i32.const 1))
          (drop (table.get $e (i32.const 0)))
          (drop (select (result externref) (local.get 0) (ref.null extern) (i32.const 1)))
          (i32.add (ref.is_null (local.get 0)) (table.size $t)))""",
    "bulk memory": """(memory 1) (data $d "abc") (table 1 funcref) (elem $s func $g)
        (func $g (memory.init $d (i32.const 0) (i32.const 0) (i32.const 3)) (data.drop $d)
          (memory.copy (i32.const 0) (i32.const 1) (i32.const 2))
          (memory.fill (i32.const 0) (i32.const 0) (i32.const 9))
          (table.init $s (i32.const 0) (i32.const 0) (i32.const 1)) (elem.drop $s)
          (table.copy (i32.const 0) (i32.const 0) (i32.const 1)))""",
    "mutable global import/export": """(import "env" "g" (global $g (mut i32))) (export "g2" (global $g))
        (import "env" "c" (global $c i32)) (global $h i32 (global.get $c))
        (func (global.set $g (i32.const 1)))""",
    "natural alignment": "(memory 1) (func (drop (i64.load align=8 (i32.const 0)))"
    " (i32.store16 align=2 (i32.const 0) (i32.const 1)))",
    "start function": "(func $s) (start $s)",
    "atomics on unshared and shared memory": """(memory 1 1 shared) (func (result i64)
        (drop (i32.atomic.rmw8.xchg_u (i32.const 0) (i32.const 1))) (atomic.fence)
        (drop (memory.atomic.wait32 (i32.const 0) (i32.const 0) (i64.const -1)))
        (i64.atomic.rmw32.cmpxchg_u (i32.const 8) (i64.const 0) (i64.const 1)))""",
}

INVALID = {
    "type mismatch in i32.add": (
        "(func (result i32) (i32.add (i32.const 1) (i64.const 2)))",
        "type mismatch in i32.add: expected i32, got i64",
    ),
    "float operand mismatch": (
        "(func (result f32) (f32.add (f32.const 1) (f64.const 2)))",
        "type mismatch in f32.add: expected f32, got f64",
    ),
    "empty stack": ("(func (result i32) i32.eqz)", "expected i32, got an empty stack"),
    "values left at end": ("(func (i32.const 1))", "values remaining"),
    "missing result": ("(func (result i32) (block (result i32) (nop)))", "got an empty stack"),
    "br_table arity": (
        """(func (param i32) (block $a (result i32) (block $b
        (br_table $a $b (i32.const 1) (local.get 0)))) drop)""",
        "br_table",
    ),
    "unknown label": ("(func br 1)", "unknown label 1"),
    "if without else changes type": (
        "(func (result i32) (if (result i32) (i32.const 1) (then (i32.const 1))))",
        "if without else",
    ),
    "unknown local": ("(func (local i32) (drop (local.get 1)))", "unknown local 1"),
    "immutable global": (
        "(global i32 (i32.const 0)) (func (global.set 0 (i32.const 1)))",
        "global is immutable",
    ),
    "unknown global": ("(func (drop (global.get 0)))", "unknown global 0"),
    "unknown function": ("(func (call 7))", "unknown function 7"),
    "no memory": ("(func (drop (i32.load (i32.const 0))))", "unknown memory 0"),
    "alignment too large": (
        "(memory 1) (func (drop (i32.load align=8 (i32.const 0))))",
        "alignment must not be larger than natural",
    ),
    "untyped select of references": (
        "(func (param funcref) (drop (select (local.get 0) (local.get 0) (i32.const 1))))",
        "select",
    ),
    "undeclared ref.func": ("(func $f (drop (ref.func $f)))", "undeclared function reference"),
    "start with params": ("(func $s (param i32)) (start $s)", "start function"),
    "duplicate export": ('(func) (export "a" (func 0)) (export "a" (func 0))', "duplicate export name"),
    "memory too large": ("(memory 65537)", "memory size must be at most 65536"),
    "min above max": ("(table 2 1 funcref)", "minimum must not be greater than maximum"),
    "non-constant initializer": ("(global i32 (i32.eqz (i32.const 0)))", "constant expression required"),
    "mutable global in initializer": (
        '(import "m" "g" (global (mut i32))) (global i32 (global.get 0))',
        "constant expression required",
    ),
    "initializer of wrong type": ("(global i32 (i64.const 0))", "type mismatch"),
    "elem type vs table type": (
        "(table 1 externref) (func $f) (elem (i32.const 0) func $f)",
        "type mismatch",
    ),
    "call_indirect needs funcref table": (
        "(table 1 externref) (func (call_indirect (i32.const 0)))",
        "call_indirect",
    ),
    "data segment without memory": ('(data (i32.const 0) "x")', "unknown memory 0"),
    "unknown data segment": ('(memory 1) (data "x") (func (data.drop 1))', "unknown data segment 1"),
    "table.copy of different types": (
        "(table 1 funcref) (table 1 externref) "
        "(func (table.copy 0 1 (i32.const 0) (i32.const 0) (i32.const 0)))",
        "type mismatch in table.copy",
    ),
    "shared memory without maximum": ("(memory 1 shared)", "shared memory must have maximum"),
    "atomic alignment below natural": (
        "(memory 1) (func (drop (i32.atomic.load align=2 (i32.const 0))))",
        "alignment must be exactly natural in i32.atomic.load",
    ),
    "unknown type in call_indirect": (
        "(table 1 funcref) (func (call_indirect (type 9) (i32.const 0)))",
        "unknown type 9",
    ),
}


@pytest.mark.parametrize("name", VALID)
def test_valid(name: str) -> None:
    load(wat(f"(module {VALID[name]})", ["--enable-threads"]))


@pytest.mark.parametrize("name", INVALID)
def test_invalid(name: str) -> None:
    text, message = INVALID[name]
    m = read_module(wat(f"(module {text})", ["--no-check", "--enable-threads"]))
    with pytest.raises(InvalidError) as info:
        validate(m)
    assert message in str(info.value)
    assert str(info.value).startswith("invalid: ")


def test_error_names_function_and_offset() -> None:
    data = wat(
        "(module (func $ok) (func $fib (param i64) (result i32) (i32.add (i32.const 1) (local.get 0))))",
        ["--no-check"],
    )
    m = read_module(data)
    add = next(i for i in m.funcs[1].body if i.op == Op.I32_ADD)
    assert data[add.offset] == 0x6A
    with pytest.raises(InvalidError) as info:
        validate(m)
    e = info.value
    assert (e.func, e.func_name, e.offset) == (1, "fib", add.offset)
    assert (
        str(e)
        == "invalid: type mismatch in i32.add: expected i32, got i64"
        + f' (function 1 "fib", offset {add.offset:#x})'
    )
