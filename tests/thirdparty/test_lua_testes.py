"""Lua 5.4.8's own test suite (``testes/`` in the lupa sdist that ``capsule.sources.lua`` fetches), natively
(gcc) and in the guest (issue 15.5).

The configuration is the one Lua's ``all.lua`` documents for a build without its test library: ``_port=true``
(no assumptions about the system: no shell commands, no locales beyond "C") and ``_soft=true`` (no long stress
loops), set with ``-e``; a fresh copy of ``testes/`` is the working directory, with ``PATH`` and ``LANG=C`` in
the environment. The interpreter is the recipe's (same sources, same flags) plus ``lua/testes_shim.c``:
``io.tmpfile`` and ``os.tmpname``, which the recipe makes fail on both sides and ``files.lua`` needs. As
``all.lua`` does, one interpreter runs the files one after another (``lua/testes_driver.lua``: one kernel load
for all of them), reporting PASS or FAIL (the error) for each; when the interpreter itself stops (a trap), the
run starts again after that file. Every file must pass natively, and each must end the same on the engine
(but for the four that exhaust wasmtime's own stack, ``WASMTIME_STACK``: they pass in the kernel).
``all.lua`` (the driver) and ``heavy.lua`` (minutes of allocating, not part of ``all.lua``) are left out.

The regular suite runs two quick files under wasmtime and in the kernel; ``CAPSULE_SLOW=1`` runs every file.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from capsule.runtime.errors import GuestTrap
from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.sources import fetch, pypi
from capsule.sources import lua as lua_recipe
from capsule.testing.engines import open_guest
from capsule.toolchain.guest import Source, build_wasm
from capsule.toolchain.native import build_native_cached
from tests.thirdparty.conftest import kernel_param

HERE = Path(__file__).resolve().parent
SHIM = HERE / "lua" / "testes_shim.c"
TESTES_CACHE = HERE.parent.parent / ".cache" / "tests" / "lua-testes"
SETTINGS = "_port=true _soft=true"
ENV = {"LANG": "C", "PATH": "/usr/bin:/bin"}
FILES = ["api", "attrib", "big", "bitwise", "bwcoercion", "calls", "closure", "code", "constructs", "coroutine",
         "cstack", "db", "errors", "events", "files", "gc", "gengc", "goto", "literals", "locals", "main", "math",
         "nextvar", "pm", "sort", "strings", "tpack", "tracegc", "utf8", "vararg", "verybig"]
#: files whose deep C recursion (Lua's 200 nested C calls, each through the setjmp trampolines) exhausts the
#: reference engine's own stack (wasmtime's default limit of native stack): there the interpreter stops with
#: "call stack exhausted"; natively and in the kernel they pass
WASMTIME_STACK = {"calls", "coroutine", "cstack", "errors"}
SAMPLE = ["bitwise", "goto"]  # quick files: the regular suite's sample
# both builds: os.tmpname from the shim (the recipe's -D makes it fail); liolib.c alone: io.tmpfile from the shim
TMPNAM = "-Dlua_tmpnam(b,e)={void testes_tmpnam(char *, int *); testes_tmpnam(b, &(e));}"
LIOLIB_FLAGS = ("-Dtmpfile=testes_tmpfile",)


@dataclass
class Suite:
    files: Path  # the unpacked testes/
    wasm: Path
    native: Path


@dataclass
class Result:
    stdout: str
    stderr: str
    code: int


def _unpack_testes(tree_sha: str) -> Path:
    """``testes/`` of the pinned sdist (downloaded by the recipe already), unpacked once into the test cache."""
    dest = TESTES_CACHE / tree_sha[:16]
    if (dest / "all.lua").is_file():
        return dest
    sdist = pypi.download_sdist("lupa", lua_recipe.LUPA_SDIST, lua_recipe.LUPA_SHA256, fetch.cache_root() / "pypi")
    prefix = f"{lua_recipe.LUPA_LUA_DIR}/testes/"
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    shutil.rmtree(part, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                target = part / member.name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None  # a regular file has contents
                target.write_bytes(src.read())
    try:
        part.rename(dest)
    except OSError:  # another worker unpacked it first
        shutil.rmtree(part, ignore_errors=True)
    return dest


def _sources(tree: Path) -> list[Source]:
    return [Source(p, LIOLIB_FLAGS if p.name == "liolib.c" else ()) for p in lua_recipe.sources(tree)] + [Source(SHIM)]


@pytest.fixture(scope="module")
def testes() -> Suite:
    try:
        tree = lua_recipe.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"Lua is not cached and PyPI cannot be reached: {e}")
    flags = [*lua_recipe.LUA_CFLAGS, "-Ulua_tmpnam", TMPNAM]
    wasm = build_wasm(_sources(tree), [*flags, *lua_recipe.LUA_WASM_FLAGS]).wasm
    native = build_native_cached(_sources(tree), flags, name="lua-testes")
    return Suite(_unpack_testes(lua_recipe.LUPA_SHA256), wasm, native)


DRIVER = HERE / "lua" / "testes_driver.lua"
RESULT = re.compile(r"^(PASS|FAIL) (\w+)(?:: (.*))?$", re.M)


def _copy(testes: Suite, tmp: Path, name: str) -> Path:
    d = tmp / name
    shutil.copytree(testes.files, d)
    shutil.copy(DRIVER, d / DRIVER.name)
    return d


def _argv(names: list[str]) -> list[str]:
    return ["lua", "-e", SETTINGS, DRIVER.name, *names]


def run_native(testes: Suite, names: list[str], tmp: Path) -> Result:
    res = subprocess.run(_argv(names), executable=str(testes.native), cwd=_copy(testes, tmp, "native"), env=ENV,
                         capture_output=True, timeout=600, check=False)
    return Result(res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace"), res.returncode)


def run_guest(testes: Suite, names: list[str], engine: str, tmp: Path) -> Result:
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=_argv(names), env=[f"{k}={v}" for k, v in ENV.items()],
                        dirs=[(_copy(testes, tmp, engine), "/")], stdin=b"", stdout=stdout, stderr=stderr)
    guest = open_guest(testes.wasm, engine)
    try:
        code = WasiHost(guest, config).run()
    except GuestTrap as e:  # the whole interpreter stops: the file it was in is named by its BEGIN line
        code, stderr = -1, io.BytesIO(f"trap: {e}".encode())
    finally:
        guest.close()
    return Result(stdout.getvalue().decode(errors="replace"), stderr.getvalue().decode(errors="replace"), code)


def outcomes(run: Callable[[list[str]], Result], names: list[str]) -> dict[str, str]:
    """Each file's outcome ("PASS", or "FAIL: message", or "trap: message" when the interpreter itself
    stopped in it, after which it starts again with the next file)."""
    out: dict[str, str] = {}
    left = list(names)
    while left:
        res = run(left)
        for m in RESULT.finditer(res.stdout):
            out[m[2]] = m[1] if m[1] == "PASS" else f"FAIL: {m[3]}"
        begun = re.findall(r"^BEGIN (\w+)$", res.stdout, re.M)
        if res.code == 0 or not begun:
            if not begun:
                out.update({n: f"no output (status {res.code}): {res.stderr[-300:]}" for n in left})
            break
        stopped = begun[-1]
        if stopped not in out:
            out[stopped] = f"stopped (status {res.code}): {res.stderr.strip()[-300:]}"
        left = left[left.index(stopped) + 1:]
    return out


def _check(testes: Suite, names: list[str], engine: str, tmp: Path) -> None:
    native = outcomes(lambda n: run_native(testes, n, tmp / f"native-{len(n)}"), names)
    assert all(v == "PASS" for v in native.values()), f"failing natively in this configuration: {native}"
    guest = outcomes(lambda n: run_guest(testes, n, engine, tmp / f"{engine}-{len(n)}"), names)
    print(f"\nLua testes on {engine}: " + ", ".join(f"{n} {guest.get(n, 'missing')}" for n in names))
    if engine == "wasmtime":
        for n in WASMTIME_STACK & set(names):
            assert guest[n].startswith("stopped (status -1): trap"), (n, guest[n])
            guest[n] = native[n]
    assert guest == native


@pytest.mark.parametrize("engine", ["wasmtime", kernel_param(slow=False)])
def test_lua_testes_sample(testes: Suite, engine: str, tmp_path: Path) -> None:
    _check(testes, SAMPLE, engine, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["wasmtime", kernel_param()])
def test_lua_testes_every_file(testes: Suite, engine: str, tmp_path: Path) -> None:
    _check(testes, FILES, engine, tmp_path)
