"""Lua 5.4.8's own test suite (``testes/`` in the lupa sdist that ``capsule.sources.lua`` fetches), file by
file, natively (gcc) and in the guest (issue 15.5).

The configuration is the one Lua's ``all.lua`` documents for a build without the test library: ``_port=true``
(no assumptions about the system: no shell commands, no locales beyond "C") and ``_soft=true`` (no long stress
loops), given with ``-e`` before the file, in a fresh copy of ``testes/`` as working directory with ``PATH``
and ``LANG=C`` in the environment. The interpreter is the recipe's (same sources, same flags) plus
``lua/testes_shim.c``: ``io.tmpfile`` and ``os.tmpname``, which the recipe makes fail on both sides and
``files.lua`` needs. A file passes when it exits 0 with nothing on stderr; the kernel must pass every file the
native build passes, with the same last line (the files print timings and random ranges, so not every line is
the same). ``all.lua`` (the driver) and ``heavy.lua`` (minutes of allocating, not part of ``all.lua``) are
left out. Every file runs under wasmtime in the regular suite and in the kernel with ``CAPSULE_SLOW=1``; two
quick files are the kernel's regular sample.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

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
KERNEL_SAMPLE = ["bitwise", "goto"]
# both builds: os.tmpname from the shim (the recipe's -D makes it fail); liolib.c alone: io.tmpfile from the shim
TMPNAM = "-Dlua_tmpnam(b,e)={void testes_tmpnam(char *, int *); testes_tmpnam(b, &(e));}"
LIOLIB_FLAGS = ("-Dtmpfile=testes_tmpfile",)


@dataclass
class Testes:
    files: Path  # the unpacked testes/
    wasm: Path
    native: Path


@dataclass
class Result:
    stdout: str
    stderr: str
    code: int

    @property
    def passed(self) -> bool:
        return self.code == 0 and not self.stderr.strip(".\n")  # some files print progress dots

    def last_line(self) -> str:
        lines = self.stdout.splitlines()
        return lines[-1] if lines else ""


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
def testes() -> Testes:
    try:
        tree = lua_recipe.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"Lua is not cached and PyPI cannot be reached: {e}")
    flags = [*lua_recipe.LUA_CFLAGS, "-Ulua_tmpnam", TMPNAM]
    wasm = build_wasm(_sources(tree), [*flags, *lua_recipe.LUA_WASM_FLAGS]).wasm
    native = build_native_cached(_sources(tree), flags, name="lua-testes")
    return Testes(_unpack_testes(lua_recipe.LUPA_SHA256), wasm, native)


def _copy(testes: Testes, tmp: Path, name: str) -> Path:
    d = tmp / name
    shutil.copytree(testes.files, d)
    return d


def run_native(testes: Testes, name: str, tmp: Path) -> Result:
    res = subprocess.run(["lua", "-e", SETTINGS, f"{name}.lua"], executable=str(testes.native),
                         cwd=_copy(testes, tmp, "native"), env=ENV, capture_output=True, timeout=300, check=False)
    return Result(res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace"), res.returncode)


def run_guest(testes: Testes, name: str, engine: str, tmp: Path) -> Result:
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=["lua", "-e", SETTINGS, f"{name}.lua"], env=[f"{k}={v}" for k, v in ENV.items()],
                        dirs=[(_copy(testes, tmp, engine), "/")], stdin=b"", stdout=stdout, stderr=stderr)
    guest = open_guest(testes.wasm, engine)
    try:
        code = WasiHost(guest, config).run()
    finally:
        guest.close()
    return Result(stdout.getvalue().decode(errors="replace"), stderr.getvalue().decode(errors="replace"), code)


def _check(testes: Testes, name: str, engine: str, tmp: Path) -> None:
    native = run_native(testes, name, tmp)
    assert native.passed, f"{name}.lua fails natively in this configuration:\n{native.stderr}"
    guest = run_guest(testes, name, engine, tmp)
    assert guest.passed, f"{name}.lua fails on {engine} (status {guest.code}):\n{guest.stderr}\n{guest.stdout[-800:]}"
    assert guest.last_line() == native.last_line()


@pytest.mark.parametrize("engine", ["wasmtime", kernel_param()])
@pytest.mark.parametrize("name", FILES)
def test_lua_testes(testes: Testes, name: str, engine: str, tmp_path: Path) -> None:
    _check(testes, name, engine, tmp_path)


@pytest.mark.requires_bpf
@pytest.mark.parametrize("name", KERNEL_SAMPLE)
def test_lua_testes_sample_in_kernel(testes: Testes, name: str, tmp_path: Path) -> None:
    _check(testes, name, "kernel", tmp_path)
