"""The package's shape: data flows one way through its sub-packages, modules do not import each other in
circles, and no module grows past what a reader holds in their head.

Every import in ``capsule/`` counts (at the top of a module, inside a function, or only for type checking):
each is parsed with ``ast``, so a lazy import against the pipeline's direction is caught as well.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "capsule"

#: What each part of capsule may import (besides itself), in the pipeline's order: C sources and third-party
#: programs go through the toolchain to wasm, the compiler turns wasm into BPF objects, the kernel layer loads
#: them, the runtime drives them; testing checks the runtime's results against a reference; demo, bench and
#: the command line sit on top; hooks (attaching compiled programs to XDP and tc) sits beside them, above the
#: runtime. ``ints`` is a leaf every part may use. The runtime does not reach back into the
#: toolchain: what needs both (the choice of engine, linking a foreign module) lives above it.
ALLOWED: dict[str, frozenset[str]] = {
    name: frozenset(deps) | ({"ints", "files"} - {name} if name not in ("ints", "files") else set())
    for name, deps in {
        "ints": (),
        "files": (),
        "examples": (),
        "bpf": (),
        "wasm": (),
        "kernel": ("bpf",),
        "opt": ("bpf", "kernel"),
        "toolchain": ("wasm",),
        "guest": ("bpf", "toolchain"),
        "compiler": ("bpf", "guest", "toolchain", "wasm"),  # toolchain: the cache directory (guest needs it too)
        "runtime": ("bpf", "compiler", "kernel", "wasm"),
        "sources": ("toolchain",),
        "testing": ("bpf", "compiler", "kernel", "runtime", "sources", "toolchain", "wasm"),
        "hooks": ("bpf", "compiler", "kernel", "runtime", "sources", "toolchain", "wasm"),
        "demo": ("bpf", "compiler", "kernel", "runtime", "testing", "toolchain", "wasm"),
        "bench": ("bpf", "compiler", "hooks", "kernel", "opt", "runtime", "sources", "testing", "toolchain",
                  "wasm"),
        "fuzz": ("bpf", "compiler", "kernel", "opt", "runtime", "wasm"),
        "cli": ("bench", "bpf", "compiler", "demo", "fuzz", "hooks", "kernel", "opt", "runtime", "sources", "testing",
                "toolchain", "wasm"),
    }.items()
}

#: module cycles inside one part, left to that part's owner: the list only shrinks
KNOWN_CIRCLES = {
    frozenset({"capsule.wasm.module", "capsule.wasm.opcodes"}),
    frozenset({"capsule.opt.analysis", "capsule.opt.local"}),
    frozenset({"capsule.bench.opt_corpus", "capsule.bench.opt_corpus_sysdig"}),
}

MAX_LINES = 600
#: modules over MAX_LINES today, to be split (each by its own owner): the list only shrinks
TOO_LONG = {"capsule/opt/values.py"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str:
    """The module ``name`` refers to: itself, or the longest prefix that is a module (``from capsule.x import
    f`` names the module capsule.x)."""
    mods = _modules()
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


@cache
def _imports(module: str) -> frozenset[str]:
    """Every capsule module that ``module`` imports."""
    path = _modules()[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from P import m`` of a submodule m needs m, not P's own names
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in _modules() else base for a in node.names]
        found |= {_resolve(n) for n in names if n == "capsule" or n.startswith("capsule.")}
    return frozenset(found - {module, "capsule"})


def _part(module: str) -> str:
    """The sub-package (or top-level module) a module belongs to: capsule.cli.run -> cli."""
    return module.split(".")[1]


def test_every_import_follows_the_pipeline() -> None:
    wrong = sorted(f"{m} imports {t}" for m in _modules() if m != "capsule" for t in _imports(m)
                   if _part(t) != _part(m) and _part(t) not in ALLOWED.get(_part(m), frozenset()))
    assert not wrong, "imports against the pipeline's direction (see ALLOWED):\n" + "\n".join(wrong)


def test_every_part_is_placed() -> None:
    parts = {_part(m) for m in _modules() if m != "capsule"}
    assert parts <= set(ALLOWED), f"not in ALLOWED (say where in the pipeline it sits): {parts - set(ALLOWED)}"


def _circles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The strongly connected components of ``graph`` with more than one node: each a set of nodes that all
    reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for t in graph.get(n, ()):
            if t not in index:
                visit(t)
                low[n] = min(low[n], low[t])
            elif t in stack:
                low[n] = min(low[n], index[t])
        if low[n] == index[n]:
            component = {stack.pop()}
            while n not in component:
                component.add(stack.pop())
            if len(component) > 1:
                out.append(frozenset(component))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return out


def test_the_pipeline_has_no_cycle() -> None:
    assert _circles(ALLOWED) == []


def test_no_new_import_cycle_between_modules() -> None:
    circles = set(_circles({m: _imports(m) for m in _modules()}))
    assert circles - KNOWN_CIRCLES == set(), f"modules importing each other in a circle: {circles - KNOWN_CIRCLES}"
    assert KNOWN_CIRCLES - circles == set(), f"gone, take them off KNOWN_CIRCLES: {KNOWN_CIRCLES - circles}"


def test_runtime_imports_nothing_above_it() -> None:
    above = {"toolchain", "sources", "testing", "demo", "bench", "cli"}
    assert not ALLOWED["runtime"] & above
    assert all("cli" not in deps for part, deps in ALLOWED.items() if part != "cli")


def test_modules_stay_short() -> None:
    lines = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in _modules().values()}
    long = {rel for rel, n in lines.items() if n > MAX_LINES}
    assert long - TOO_LONG == set(), {rel: lines[rel] for rel in long - TOO_LONG}
    assert TOO_LONG - long == set(), f"short enough now, take them off TOO_LONG: {TOO_LONG - long}"


def test_the_checks_see_imports() -> None:
    """The parser itself: a lazy import inside a function and a relative import are both found."""
    assert "capsule.testing.engines" in _imports("capsule.cli.run")  # at the top
    assert "capsule.toolchain.guest" in _imports("capsule.cli.build")  # inside a function
    assert "capsule.runtime.errors" in _imports("capsule.runtime")  # relative (from .errors import ...)
