"""The real programs ``capsule bench programs`` measures: where each one's sources come from, how it is built
natively and for capsule, what it is run on, and which part of its output must agree.

A program whose recipe (``capsule.sources.<name>``) or workload file is not in this checkout raises ``Missing``
when it is prepared: the table shows a row saying so. Recipes are looked up when the bench runs, so programs
that other work adds (SQLite, QuickJS, DOOM, wasm3) join the table the day their recipe lands. The integer
kernels are measured by ``capsule.bench.integers``' own builds (see ``programs.measure_integer``).

Targets are issue 13's (kernel/native at most this); the article's figures are the BPF Capsule article's
Intel table (``/work/shared/seeds/bpf-capsule-article.txt``: LLVM-optimised BPF on a 12700K, one core).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from capsule.toolchain.cache import cache_dir
from capsule.toolchain.guest import build_wasm
from capsule.toolchain.native import build_native

from .wasi_runs import Invocation, Output

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
INPUTS = Path(__file__).resolve().parent / "inputs"
LUA_BENCH = REPO / "tests" / "thirdparty" / "lua" / "bench.lua"
ZROUND = REPO / "tests" / "thirdparty" / "zround.c"
ROUND_TRIP_BYTES = 4 << 20
DOOM_FRAMES = (10, 60)  # frames of the two DOOM runs: a frame's time is their difference over 50 frames
WASM3_FIB = 24

#: the article's kernel/native ratios (Intel i7-12700K table)
ARTICLE = {"lua": 7.5, "sqlite": 6.6, "quickjs": 9.2, "doom": 3.5, "cpython": 15.6}
#: issue 13's targets for kernel/native; a program with an article figure must beat it too
TARGET = {"integers": 2.0, "demo": 2.0, "zlib": 1.3, "lua": 4.0, "doom": 2.0, "wasm3": 10.0, "sqlite": 6.6,
          "quickjs": 9.2, "cpython": 15.6}


class Missing(Exception):
    """The program's recipe or workload is not in this checkout."""


@dataclass
class Builds:
    """How to make a program's two builds (each call builds or finds it in its cache)."""

    native: Callable[[], Path]
    wasm: Callable[[], Path]


def _keep(out: Output) -> Output:
    return out


@dataclass(frozen=True)
class Workload:
    """One row of the table: a program and what it is run on."""

    name: str
    what: str
    group: str  # what ``--only`` may name besides the row itself ("zlib" selects both zlib rows)
    prepare: Callable[[], Builds]  # fetch the sources (Missing, FetchError) and say how to build
    invocation: Callable[[int], Invocation]  # the run, given a scale (DOOM: frames; others ignore it)
    scales: tuple[int, ...] = (0,)  # two scales: the time per unit is the difference of the two runs
    unit: str = "run"
    normalize: Callable[[Output], Output] = _keep  # what may differ between ILP32 and LP64 builds, dropped

    @property
    def article(self) -> float | None:
        return ARTICLE.get(self.group)

    @property
    def target(self) -> float | None:
        return TARGET.get(self.group)


# -- building ------------------------------------------------------------------------------------------------
def _digest(paths: Sequence[Path], *extra: object) -> str:
    h = hashlib.sha256(json.dumps([str(e) for e in extra]).encode())
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def native_cached(name: str, sources: Sequence[Path], flags: Sequence[str]) -> Path:
    """gcc's build of ``sources``, cached by content and flags in ``cache_dir("bench-native")``."""
    root = cache_dir("bench-native")
    exe = root / f"{name}-{_digest(sources, *flags)}"
    if not exe.is_file():
        root.mkdir(parents=True, exist_ok=True)
        part = exe.with_name(f"{exe.name}.{os.getpid()}")
        build_native(sources, part, flags)
        os.replace(part, exe)
    return exe


def _recipe(name: str) -> ModuleType:
    try:
        return importlib.import_module(f"capsule.sources.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"capsule.sources.{name}":
            raise Missing(f"no recipe: capsule.sources.{name} is not in this checkout") from None
        raise


def _needs(path: Path) -> bytes:
    if not path.is_file():
        raise Missing(f"the workload {path.relative_to(REPO)} is not in this checkout")
    return path.read_bytes()


def _plain(sources: Sequence[Path], flags: Sequence[str], name: str) -> Builds:
    return Builds(native=lambda: native_cached(name, sources, flags),
                  wasm=lambda: build_wasm(sources, flags).wasm)


# -- the programs ----------------------------------------------------------------------------------------------
def _demo() -> Builds:
    return _plain([EXAMPLES / "wordcount_primes.c"], ["-O2"], "demo")


def _zlib_builds(main: Path, name: str) -> Builds:
    zlib = _recipe("zlib")
    tree = zlib.fetch()
    sources = [*zlib.library(tree), main]
    flags = ["-O2", f"-I{tree}", *zlib.CFLAGS, "-w"]
    return Builds(native=lambda: native_cached(name, sources, flags),
                  wasm=lambda: build_wasm(sources, [*flags, "-Wno-deprecated-non-prototype"]).wasm)


def _zlib_example() -> Builds:
    tree = _recipe("zlib").fetch()
    return _zlib_builds(tree / "test" / "example.c", "zlib-example")


def _zround() -> Builds:
    _needs(ZROUND)
    return _zlib_builds(ZROUND, "zlib-round-trip")


_FLAGS_LINE = re.compile(rb"compile flags = 0x[0-9a-f]+\n?")
_TIME_LINE = re.compile(rb"time_ns \w+ \d+\n")


def _without_compile_flags(out: Output) -> Output:
    """zlibCompileFlags() encodes sizeof(long), sizeof(void *): LP64 natively, ILP32 in wasm32."""
    return replace(out, stdout=_FLAGS_LINE.sub(b"", out.stdout))


def _without_timings(out: Output) -> Output:
    """zround prints the time its zlib work took on stderr, which no two runs share."""
    return replace(out, stderr=_TIME_LINE.sub(b"", out.stderr))


_ZONE_LINE = re.compile(rb"zone memory: 0x[0-9a-f]+,")


def _without_zone_address(out: Output) -> Output:
    """DOOM prints the address malloc gave its zone: a 64-bit one natively, an offset in linear memory in wasm."""
    return replace(out, stdout=_ZONE_LINE.sub(b"zone memory: (address),", out.stdout))


def _lua() -> Builds:
    lua = _recipe("lua")
    _needs(LUA_BENCH)
    tree = lua.fetch()
    return Builds(native=lambda: lua.build_native(tree, cache_dir("bench-native")),
                  wasm=lambda: lua.build_wasm(tree))


def _from_recipe(name: str) -> Callable[[], Builds]:
    """A program whose recipe builds it both ways from its fetched tree (``fetch``, ``build_native(tree)``,
    ``build_wasm(tree)``)."""

    def prepare() -> Builds:
        recipe = _recipe(name)
        tree = recipe.fetch()
        return Builds(native=lambda: Path(recipe.build_native(tree)), wasm=lambda: Path(recipe.build_wasm(tree)))

    return prepare


def _sqlite_script() -> bytes:
    """Tables, 20,000 inserts in one transaction, an index, joins, aggregates, sorting, a recursive CTE."""
    lines = ["CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT, city TEXT);",
             "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, item TEXT, qty INTEGER, price REAL);",
             "BEGIN;"]
    cities = ("Lyon", "Oslo", "Kyoto", "Quito", "Perth", "Tunis", "Hanoi")
    lines += [f"INSERT INTO customer VALUES ({i}, 'customer {i}', '{cities[i % len(cities)]}');" for i in range(1, 201)]
    seed = 2024
    for _ in range(20_000):
        seed = (seed * 1103515245 + 12345) % (1 << 31)
        lines.append(f"INSERT INTO orders(customer, item, qty, price) VALUES ({seed % 200 + 1}, "
                     f"'item {seed // 200 % 97}', {seed // 977 % 50 + 1}, {seed % 99991 / 100});")
    lines += ["COMMIT;", "CREATE INDEX orders_customer ON orders(customer);",
              "SELECT c.city, count(*), sum(o.qty), printf('%.2f', sum(o.qty * o.price)) FROM orders o "
              "JOIN customer c ON c.id = o.customer GROUP BY c.city ORDER BY 4 DESC;",
              "SELECT item, count(*) AS n FROM orders WHERE item LIKE 'item 1%' GROUP BY item ORDER BY n DESC, item "
              "LIMIT 5;",
              "SELECT customer, printf('%.3f', avg(price)) FROM orders GROUP BY customer ORDER BY avg(price) DESC "
              "LIMIT 5;",
              "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 50000) "
              "SELECT sum(x * x % 7919) FROM n;",
              "UPDATE orders SET qty = qty + 1 WHERE price > 500;",
              "SELECT sum(qty), count(DISTINCT item) FROM orders;"]
    return "\n".join(lines).encode() + b"\n"


def _wasm3_module() -> bytes:
    from .integers import build_wasm as kernel_wasm

    return kernel_wasm("fib")


def _doom_invocation(frames: int) -> Invocation:
    wad = _recipe("doom").wad()
    name = Path(wad).name
    return Invocation(("doom", "-iwad", name, "-capsule-frames", str(frames)), ((name, Path(wad).read_bytes()),),
                      env=("LANG=C", "HOME=/"))


WORKLOADS: tuple[Workload, ...] = (
    Workload("demo", "capsule/examples/wordcount_primes.c (primes, N-queens, a file, word counts)", "demo", _demo,
             lambda _: Invocation(("wordcount_primes",))),
    Workload("zlib-example", "zlib 1.2.13's test/example.c", "zlib", _zlib_example,
             lambda _: Invocation(("example",)), normalize=_without_compile_flags),
    Workload("zlib-round-trip", f"deflate and inflate of {ROUND_TRIP_BYTES >> 20} MiB (tests/thirdparty/zround.c)",
             "zlib", _zround,
             lambda _: Invocation(("zround", "deflate", str(ROUND_TRIP_BYTES), "6", "k.z", "inflate",
                                   str(ROUND_TRIP_BYTES), "k.z")), normalize=_without_timings),
    Workload("lua", "Lua 5.4.8 running tests/thirdparty/lua/bench.lua", "lua", _lua,
             lambda _: Invocation(("lua", "bench.lua"), (("bench.lua", _needs(LUA_BENCH)),))),
    Workload("sqlite", "SQLite 3.52 shell: 20,000 inserts, an index, joins, aggregates, a recursive CTE", "sqlite",
             _from_recipe("sqlite"), lambda _: Invocation(("sqlite3", ":memory:"), stdin=_sqlite_script())),
    Workload("quickjs", "QuickJS running capsule/bench/inputs/bench.js", "quickjs", _from_recipe("quickjs"),
             lambda _: Invocation(("qjs", "bench.js"), (("bench.js", (INPUTS / "bench.js").read_bytes()),))),
    Workload("doom", "doomgeneric on Freedoom, headless: one frame (the difference of a 60- and a 10-frame run)",
             "doom", _from_recipe("doom"), _doom_invocation, scales=DOOM_FRAMES, unit="frame",
             normalize=_without_zone_address),
    Workload("wasm3", f"wasm3 interpreting fib({WASM3_FIB}) (capsule/bench/kernels/fib.c)", "wasm3",
             _from_recipe("wasm3"),
             lambda _: Invocation(("wasm3", "fib.wasm", "run", str(WASM3_FIB)), (("fib.wasm", _wasm3_module()),))),
    Workload("cpython", "CPython (the article's 15.6x)", "cpython", _from_recipe("cpython"),
             lambda _: Invocation(("python3", "-c", "print(sum(range(10**6)))"))),
)


def by_name(names: Sequence[str]) -> list[Workload]:
    """The workloads ``names`` select (a row's name or its group), in table order."""
    return [w for w in WORKLOADS if not names or w.name in names or w.group in names]
