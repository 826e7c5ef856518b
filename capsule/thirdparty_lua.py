"""Lua 5.4.8: its sources from the ``lupa`` sdist on PyPI, and the recipe that builds the ``lua`` interpreter
the same way natively (gcc) and for capsule (wasm32-wasi, then BPF).

Where the sources come from: ``lupa`` (Python bindings for Lua) bundles the Lua team's tree for each version
it supports; ``lupa-2.8.tar.gz`` carries Lua 5.4.8 in ``third-party/lua54/``. Only that folder is unpacked,
as ``lua-5.4.8`` in capsule's source cache (``capsule.thirdparty.cache_root()``).

Why not ``pip download``: pip cannot download an sdist without preparing its metadata, and lupa's
``setup.py`` builds the bundled LuaJIT while doing so (minutes, and a C toolchain for the host). capsule
asks the index pip itself uses (the PEP 691 JSON form of ``https://pypi.org/simple``; ``$CAPSULE_PYPI_INDEX``
moves it) for the file's address and SHA-256, downloads it, and checks it against both that hash and the
SHA-256 pinned here: a different tarball under the same name is refused rather than compiled.

The build recipe: Lua's ``makefile`` objects (``CORE_O`` + ``LIB_O`` + ``lua.o``; not ``luac``), in its
generic-C configuration (no ``LUA_USE_LINUX``: no ``dlopen``, no ``popen``) on both sides, so native and guest
run the same code. wasi-libc has neither ``tmpnam`` nor ``system`` nor ``tmpfile``: ``os.tmpname`` fails
(``LUA_TMPNAMBUFSIZE``/``lua_tmpnam`` below), and a small C file (written next to the tree, compiled into both
builds) makes ``os.execute`` report "no shell" and ``io.tmpfile`` fail. Errors use setjmp/longjmp, which
capsule's toolchain lowers (``capsule/guest/include/setjmp.h``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from capsule.thirdparty import STAMP, FetchError, RegistryUnavailable, _locked, _sha256, cache_root

LUA_VERSION = "5.4.8"
LUPA_VERSION = "2.8"
LUPA_SDIST = f"lupa-{LUPA_VERSION}.tar.gz"
LUPA_SHA256 = "d8022641b9ec8ecf2c5ecbe9f47e5a70e0b87c4b5ae921b92cb02a638e0acd08"
LUPA_LUA_DIR = f"lupa-{LUPA_VERSION}/third-party/lua54"
DEFAULT_PYPI_INDEX = "https://pypi.org/simple"

# Lua's makefile: CORE_O, LIB_O, then the interpreter (lua.o); luac is not built.
LUA_CORE = ("lapi", "lcode", "lctype", "ldebug", "ldo", "ldump", "lfunc", "lgc", "llex", "lmem", "lobject",
            "lopcodes", "lparser", "lstate", "lstring", "ltable", "ltm", "lundump", "lvm", "lzio")
LUA_LIB = ("lauxlib", "lbaselib", "lcorolib", "ldblib", "liolib", "lmathlib", "loadlib", "loslib", "lstrlib",
           "ltablib", "lutf8lib", "linit")
SHIM = "capsule_wasi.c"
SHIM_SOURCE = """\
/* capsule: what wasi-libc lacks and Lua's generic-C build calls (compiled into the native build too, so both
 * behave alike). No shell: os.execute() is false, os.execute(cmd) fails; no temporary files. */
#include <stdio.h>
#include <stdlib.h>
int system(const char *cmd) { return cmd ? -1 : 0; }
FILE *tmpfile(void) { return NULL; }
"""
# both builds: os.tmpname fails cleanly instead of calling tmpnam (absent from wasi-libc)
LUA_CFLAGS = ("-O2", "-DLUA_TMPNAMBUFSIZE=32", "-Dlua_tmpnam(b,e)={e=1;}")
# the guest: wasi-libc's emulations for lua.c's signal() and loslib's clock()
LUA_WASM_FLAGS = ("-D_WASI_EMULATED_SIGNAL", "-D_WASI_EMULATED_PROCESS_CLOCKS", "-lwasi-emulated-signal",
                  "-lwasi-emulated-process-clocks")


def pypi_index() -> str:
    return (os.environ.get("CAPSULE_PYPI_INDEX") or DEFAULT_PYPI_INDEX).rstrip("/")


def lua_cached(root: Path | None = None) -> Path | None:
    """The unpacked Lua tree if it is in the cache (complete, from the pinned sdist), else None."""
    tree = (root or cache_root()) / f"lua-{LUA_VERSION}"
    try:
        return tree if (tree / STAMP).read_text().strip() == LUPA_SHA256 else None
    except OSError:
        return None


def fetch_lua(root: Path | None = None) -> Path:
    """Lua 5.4.8's source tree (``lua.h``, the ``.c`` files, ``capsule_wasi.c``), fetched once and cached.

    Raises RegistryUnavailable when it is not cached and PyPI cannot be reached, FetchError when the download
    does not match its checksums.
    """
    root = root or cache_root()
    hit = lua_cached(root)
    if hit is not None:
        return hit
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lua.lock"):
        hit = lua_cached(root)  # another process may have finished while we waited
        if hit is not None:
            return hit
        sdist = _download_sdist(root / "pypi")
        return _unpack_lua(sdist, root / f"lua-{LUA_VERSION}")


def sdist_url(project: str, filename: str, index: str | None = None) -> tuple[str, str]:
    """(address, sha256) of ``filename`` in ``project``'s page of the simple index (PEP 691 JSON)."""
    url = f"{index or pypi_index()}/{project}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            page = json.load(resp)
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise RegistryUnavailable(f"cannot reach the package index at {url}: {e}") from None
    except ValueError as e:
        raise FetchError(f"{url} did not answer with the JSON simple API: {e}") from None
    for f in page.get("files", []):
        if f.get("filename") == filename:
            return f["url"], f.get("hashes", {}).get("sha256", "")
    raise FetchError(f"{url} lists no file {filename}")


def _download_sdist(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / LUPA_SDIST
    if path.is_file() and _sha256(path) == LUPA_SHA256:
        return path
    url, listed = sdist_url("lupa", LUPA_SDIST)
    if listed and listed != LUPA_SHA256:
        raise FetchError(f"the index lists {LUPA_SDIST} with SHA-256 {listed}, capsule pins {LUPA_SHA256}")
    part = path.with_name(path.name + f".{os.getpid()}.part")
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, open(part, "wb") as out:
            shutil.copyfileobj(resp, out)
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        part.unlink(missing_ok=True)
        raise RegistryUnavailable(f"cannot download {url}: {e}") from None
    got = _sha256(part)
    if got != LUPA_SHA256:
        part.unlink()
        raise FetchError(f"{LUPA_SDIST} has SHA-256 {got}, capsule pins {LUPA_SHA256}: refusing to build it")
    os.replace(part, path)
    return path


def _unpack_lua(sdist: Path, tree: Path) -> Path:
    """Unpack only ``third-party/lua54`` (flat: Lua's .c and .h files) as ``tree``, add the shim, stamp it
    last; the directory appears under its final name only when complete."""
    prefix = LUPA_LUA_DIR + "/"
    with tempfile.TemporaryDirectory(prefix=f".{tree.name}-", dir=tree.parent) as tmp:
        top = Path(tmp) / tree.name
        top.mkdir()
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                rel = member.name[len(prefix):] if member.name.startswith(prefix) else ""
                if member.isfile() and rel and "/" not in rel and rel.endswith((".c", ".h")):
                    src = tar.extractfile(member)
                    assert src is not None  # a regular file always has contents
                    (top / rel).write_bytes(src.read())
        if not (top / "lua.h").is_file():
            raise FetchError(f"{sdist.name} has no {LUPA_LUA_DIR}/lua.h")
        (top / SHIM).write_text(SHIM_SOURCE)
        (top / STAMP).write_text(LUPA_SHA256 + "\n")
        if tree.exists():
            shutil.rmtree(tree)  # an incomplete tree left by an interrupted run (no valid stamp)
        os.replace(top, tree)
    return tree


def lua_sources(tree: Path) -> list[Path]:
    """The interpreter's C files in ``tree``: core, libraries, ``lua.c`` and the shim."""
    return [tree / f"{name}.c" for name in (*LUA_CORE, *LUA_LIB, "lua")] + [tree / SHIM]


def build_lua_wasm(tree: Path, flags: Sequence[str] = ()) -> Path:
    """The ``lua`` interpreter as a wasm32-wasi module with capsule's runtime (cached by content hash)."""
    from capsule.toolchain_c import build_wasm

    return build_wasm(lua_sources(tree), [*LUA_CFLAGS, *LUA_WASM_FLAGS, *flags]).wasm


def build_lua_native(tree: Path, cache: Path, flags: Sequence[str] = ()) -> Path:
    """The same interpreter built natively with gcc (the reference), cached in ``cache`` by flags."""
    from capsule.toolchain_c import build_native

    key = hashlib.sha256(json.dumps([LUPA_SHA256, SHIM_SOURCE, LUA_CFLAGS, list(flags)]).encode()).hexdigest()
    exe = cache / f"lua-{LUA_VERSION}-{key[:16]}"
    if not exe.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        part = exe.with_name(exe.name + f".{os.getpid()}")
        build_native(lua_sources(tree), part, [*LUA_CFLAGS, *flags])
        os.replace(part, exe)
    return exe
