"""``Op`` is built from the instruction table at run time; a type checker reads the declaration spelled out
beside it instead. These tests keep the two the same, so that mypy checks the members that really exist."""

from __future__ import annotations

import ast
import inspect

from capsule.wasm import opcodes
from capsule.wasm.opcodes import Op


def _declared_members() -> list[tuple[str, int]]:
    """The (name, value) pairs of the ``class Op`` that only type checkers see, read from the source."""
    tree = ast.parse(inspect.getsource(opcodes))
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "Op"]
    assert len(classes) == 1, "opcodes.py should declare class Op exactly once, for type checkers"
    members = []
    for stmt in classes[0].body:
        assert isinstance(stmt, ast.Assign), f"line {stmt.lineno}: only NAME = value lines belong in Op"
        (target,) = stmt.targets
        assert isinstance(target, ast.Name) and isinstance(stmt.value, ast.Constant)
        members.append((target.id, stmt.value.value))
    return members


def test_declaration_matches_the_table() -> None:
    declared = _declared_members()
    built = [(member.name, member.value) for member in Op]
    missing = sorted(set(built) - set(declared))
    extra = sorted(set(declared) - set(built))
    assert not missing and not extra, f"declare in class Op: {missing}; remove from it: {extra}"
    assert declared == built, "class Op should list the members in the table's order"

