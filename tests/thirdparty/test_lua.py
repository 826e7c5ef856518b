"""Lua 5.4.8 (from the ``lupa`` sdist on PyPI) built from the same sources natively and for capsule, run in the
kernel.

``lua -l bench features.lua`` runs our own scripts (``tests/thirdparty/lua``): ``bench.lua`` (work for the
time ratio, printing checksums) and ``features.lua`` (tables, metatables, closures, string.format, integer
and float arithmetic, strings and patterns, table.sort with comparators, coroutines, pcall/error/xpcall,
goto), which ends with an uncaught error. Native gcc, wasmtime and the kernel must print the same stdout and
stderr (Lua's message and traceback) and exit with the same status (1).

The first run fetches lupa's sdist (6 MB) and builds Lua natively and as wasm (cached afterwards); every
kernel run compiles Lua to BPF (~320,000 instructions) and loads it, which is most of the time.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.sources import fetch, pypi
from capsule.sources import lua as lua_recipe
from capsule.testing.engines import open_guest

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "lua"
NATIVE_CACHE = HERE.parent.parent / ".cache" / "tests" / "native"
ARGS = ["-l", "bench", "features.lua"]
ENV = ["LANG=C"]


@dataclass
class Run:
    stdout: bytes
    stderr: bytes
    code: int
    load_s: float = 0.0  # compile to BPF + verify + JIT (kernel), or 0 natively
    run_s: float = 0.0


@dataclass
class Lua:
    tree: Path
    wasm: Path
    native: Path


@pytest.fixture(scope="module")
def lua() -> Lua:
    try:
        tree = lua_recipe.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"Lua is not cached and PyPI cannot be reached: {e}")
    return Lua(tree, lua_recipe.build_wasm(tree), lua_recipe.build_native(tree, NATIVE_CACHE))


def run_native(exe: Path, args: list[str]) -> Run:
    """Run with the scripts directory as working directory and argv[0] "lua" (Lua names itself by it)."""
    t0 = time.perf_counter()
    res = subprocess.run(["lua", *args], executable=str(exe), cwd=SCRIPTS, env=dict(e.split("=", 1) for e in ENV),
                         capture_output=True, timeout=120, check=False)
    return Run(res.stdout, res.stderr, res.returncode, 0.0, time.perf_counter() - t0)


def run_guest(wasm: Path, args: list[str], engine: str) -> Run:
    """Run on ``engine`` with the scripts directory as the guest's root (its working directory)."""
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=["lua", *args], env=ENV, dirs=[(SCRIPTS, "/")], stdin=b"", stdout=stdout,
                        stderr=stderr)
    t0 = time.perf_counter()
    guest = open_guest(wasm, engine)
    try:
        t1 = time.perf_counter()
        code = WasiHost(guest, config).run()
        t2 = time.perf_counter()
    finally:
        guest.close()
    return Run(stdout.getvalue(), stderr.getvalue(), code, t1 - t0, t2 - t1)


def _same(native: Run, guest: Run) -> None:
    assert guest.stdout.decode() == native.stdout.decode()
    assert guest.stderr.decode() == native.stderr.decode()
    assert guest.code == native.code


# -- the sources -------------------------------------------------------------------------------------------
def test_fetched_tree_is_lua_5_4_8_and_cached(lua: Lua) -> None:
    header = (lua.tree / "lua.h").read_text()
    assert '#define LUA_VERSION_RELEASE\t"8"' in header and '#define LUA_VERSION_MINOR\t"4"' in header
    assert (lua.tree / fetch.STAMP).read_text().strip() == lua_recipe.LUPA_SHA256
    assert all(p.is_file() for p in lua_recipe.sources(lua.tree))
    assert {p.stem for p in lua_recipe.sources(lua.tree)} >= {"lvm", "ldo", "lua"}
    assert "luac" not in {p.stem for p in lua_recipe.sources(lua.tree)}  # the interpreter only
    t0 = time.perf_counter()
    assert lua_recipe.fetch() == lua.tree  # the second call is a cache hit: no network
    assert time.perf_counter() - t0 < 0.5


def _cached_sdist() -> Path:
    sdist = fetch.cache_root() / "pypi" / lua_recipe.LUPA_SDIST
    if not sdist.is_file():
        pytest.skip("the sdist is not in the cache (the tree came from elsewhere)")
    return sdist


def test_unpack_takes_only_lua_and_stamps_last(lua: Lua, tmp_path: Path) -> None:
    tree = lua_recipe._unpack_lua(_cached_sdist(), tmp_path / "lua-5.4.8")
    names = {p.name for p in tree.iterdir()}
    assert {"lua.h", "lvm.c", "lua.c", lua_recipe.SHIM, fetch.STAMP} <= names
    assert all(n.endswith((".c", ".h")) or n == fetch.STAMP for n in names)
    assert lua_recipe.cached(tmp_path) == tree
    assert [p.name for p in tmp_path.iterdir()] == ["lua-5.4.8"]  # no temporary directory left behind


def test_wrong_sdist_is_refused(lua: Lua, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An index that serves another tarball under lupa's name (here: a tarball of the scripts).
    fake = tmp_path / "fake.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(SCRIPTS / "bench.lua", "lupa-2.8/third-party/lua54/lua.h")
    monkeypatch.setattr(pypi, "sdist_url", lambda project, name: (fake.as_uri(), ""))
    with pytest.raises(fetch.FetchError, match="capsule pins"):
        lua_recipe.fetch(tmp_path / "src")
    assert lua_recipe.cached(tmp_path / "src") is None
    assert list((tmp_path / "src" / "pypi").iterdir()) == []  # the bad download was removed
    # An index that lists a different hash for the file is refused before anything is downloaded.
    monkeypatch.setattr(pypi, "sdist_url", lambda project, name: (fake.as_uri(), "0" * 64))
    with pytest.raises(fetch.FetchError, match="the index lists"):
        lua_recipe.fetch(tmp_path / "src")


def test_unreachable_index_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSULE_PYPI_INDEX", "http://127.0.0.1:9/simple")  # the discard port: refused
    with pytest.raises(fetch.RegistryUnavailable, match="cannot reach the package index"):
        lua_recipe.fetch(tmp_path / "src")
    assert lua_recipe.cached(tmp_path / "src") is None


# -- the interpreter -----------------------------------------------------------------------------------------
def test_native_reference_is_what_the_script_expects(lua: Lua) -> None:
    """The reference itself: the script ran to its uncaught error, with Lua's message and status."""
    native = run_native(lua.native, ARGS)
    assert native.code == 1
    assert native.stderr.startswith(b"lua: features.lua:")
    assert b"this error is not caught\nstack traceback:\n\t[C]: in function 'error'" in native.stderr
    out = native.stdout.decode()
    for section in ("tables", "closures", "string.format", "integers and floats", "strings", "table.sort",
                    "coroutines", "pcall and error", "goto", "misc", "uncaught"):
        assert f"== {section}\n" in out
    assert "false\tboom\n" in out and "1:1 1:3 2:1 2:3 3:1 3:3 \nlooped\t5\n" in out
    assert out.endswith("about to fail\n")


def test_script_under_wasmtime_matches_native(lua: Lua) -> None:
    _same(run_native(lua.native, ARGS), run_guest(lua.wasm, ARGS, "wasmtime"))


@pytest.mark.requires_bpf
def test_script_in_kernel_matches_native(lua: Lua) -> None:
    native = run_native(lua.native, ARGS)
    fds = set(os.listdir("/proc/self/fd"))
    kernel = run_guest(lua.wasm, ARGS, "kernel")
    assert set(os.listdir("/proc/self/fd")) == fds  # maps, programs, BTF and the arena are all closed
    print(f"\nlua -l bench features.lua: native {native.run_s * 1e3:.1f} ms, kernel load {kernel.load_s:.1f} s "
          f"+ run {kernel.run_s * 1e3:.1f} ms, ratio {kernel.run_s / native.run_s:.1f}")
    _same(native, kernel)

