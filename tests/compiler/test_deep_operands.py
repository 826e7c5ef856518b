"""Operand-stack slots above the registers (``stack.OperandStack.read(consume=True)``): a value computed into a
frame-homed slot and consumed by the next instruction is not stored; the result must be what it was when it
was. The expression below nests twelve deep, past the seven stack registers, through binary and unary
operators, loads and stores whose operands sit in frame slots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from capsule.compiler import Options, compile_module
from capsule.runtime import Instance
from capsule.wasm import load

from .test_regressions_spec import wat

pytestmark = pytest.mark.requires_bpf

M32 = (1 << 32) - 1
DEPTH = 12

# level k: (op (local.get k % 4) <inner>), with the Python meaning of each op
OPS: list[tuple[str, Callable[[int, int], int]]] = [
    ("i32.add", lambda a, b: a + b),
    ("i32.mul", lambda a, b: a * b),
    ("i32.sub", lambda a, b: a - b),
    ("i32.xor", lambda a, b: a ^ b),
]


def clz(x: int) -> int:
    return 32 - x.bit_length()


def expression() -> str:
    # innermost: a load from a computed address (the address itself a frame-homed value), then clz and a store
    inner = "(i32.load offset=64 (i32.and (i32.add (local.get 0) (local.get 1)) (i32.const 0)))"
    for k in reversed(range(DEPTH)):
        op = OPS[k % len(OPS)][0]
        inner = f"({op} (local.get {k % 4}) {inner})"
        if k == DEPTH // 2:
            inner = f"(i32.clz {inner})"
    return inner


MODULE = f"""(module (memory 1)
  (func (export "f") (param i32 i32 i32 i32) (result i32)
    (i32.store offset=64 (i32.and (local.get 0) (i32.const 0)) (i32.add (local.get 2) (local.get 3)))
    {expression()}))"""


def expected(args: tuple[int, int, int, int]) -> int:
    v = (args[2] + args[3]) & M32
    for k in reversed(range(DEPTH)):
        v = OPS[k % len(OPS)][1](args[k % 4], v) & M32
        if k == DEPTH // 2:
            v = clz(v)
    return v - (1 << 32) if v >> 31 else v  # i32 results come back signed


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "fast"])
def test_deep_expression(tmp_path: Path, checked: bool) -> None:
    with Instance(compile_module(load(wat(tmp_path, MODULE)), Options(checked=checked))) as inst:
        for args in ((1, 2, 3, 4), (M32, 7, 0x8000_0000, 12345), (0, 0, 0, 0), (9, M32, 3, 0x10)):
            assert inst.call("f", *args) == [expected(args)], args
