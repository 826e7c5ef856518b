"""Lua 5.4.8: its sources from the ``lupa`` sdist on PyPI, and the recipe that builds the ``lua`` interpreter
the same way natively (gcc) and for capsule (wasm32-wasi, then BPF).

Where the sources come from: ``lupa`` (Python bindings for Lua) bundles the Lua team's tree for each version
it supports; ``lupa-2.8.tar.gz`` carries Lua 5.4.8 in ``third-party/lua54/``. Only that folder is unpacked,
as ``lua-5.4.8`` in capsule's source cache (``capsule.sources.fetch.cache_root()``). The sdist comes
through ``capsule.sources.pypi`` (not ``pip download``, which would build lupa's bundled LuaJIT), checked
against the SHA-256 pinned here.

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
import tarfile
from collections.abc import Sequence
from pathlib import Path

from capsule.sources.fetch import FetchError, cache_root, fetch_once, staged, stamped
from capsule.sources.pypi import download_sdist
from capsule.toolchain.guest import build_wasm as _build_wasm
from capsule.toolchain.native import build_native as _build_native

LUA_VERSION = "5.4.8"
LUPA_VERSION = "2.8"
LUPA_SDIST = f"lupa-{LUPA_VERSION}.tar.gz"
LUPA_SHA256 = "d8022641b9ec8ecf2c5ecbe9f47e5a70e0b87c4b5ae921b92cb02a638e0acd08"
LUPA_LUA_DIR = f"lupa-{LUPA_VERSION}/third-party/lua54"

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


def cached(root: Path | None = None) -> Path | None:
    """The unpacked Lua tree if it is in the cache (complete, from the pinned sdist), else None."""
    return stamped((root or cache_root()) / f"lua-{LUA_VERSION}", LUPA_SHA256)


def fetch(root: Path | None = None) -> Path:
    """Lua 5.4.8's source tree (``lua.h``, the ``.c`` files, ``capsule_wasi.c``), fetched once and cached.

    Raises RegistryUnavailable when it is not cached and PyPI cannot be reached, FetchError when the download
    does not match its checksums.
    """
    root = root or cache_root()
    tree = root / f"lua-{LUA_VERSION}"

    def fetch_tree() -> Path:
        return _unpack_lua(download_sdist("lupa", LUPA_SDIST, LUPA_SHA256, root / "pypi"), tree)

    return fetch_once(tree, LUPA_SHA256, fetch_tree)


def _unpack_lua(sdist: Path, tree: Path) -> Path:
    """Unpack only ``third-party/lua54`` (flat: Lua's .c and .h files) as ``tree`` and add the shim, atomically
    (``staged``)."""
    prefix = LUPA_LUA_DIR + "/"
    with staged(tree, LUPA_SHA256) as top:
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
    return tree


def sources(tree: Path) -> list[Path]:
    """The interpreter's C files in ``tree``: core, libraries, ``lua.c`` and the shim."""
    return [tree / f"{name}.c" for name in (*LUA_CORE, *LUA_LIB, "lua")] + [tree / SHIM]


def build_wasm(tree: Path, flags: Sequence[str] = ()) -> Path:
    """The ``lua`` interpreter as a wasm32-wasi module with capsule's runtime (cached by content hash)."""
    return _build_wasm(sources(tree), [*LUA_CFLAGS, *LUA_WASM_FLAGS, *flags]).wasm


def build_native(tree: Path, cache: Path, flags: Sequence[str] = ()) -> Path:
    """The same interpreter built natively with gcc (the reference), cached in ``cache`` by flags."""
    key = hashlib.sha256(json.dumps([LUPA_SHA256, SHIM_SOURCE, LUA_CFLAGS, list(flags)]).encode()).hexdigest()
    exe = cache / f"lua-{LUA_VERSION}-{key[:16]}"
    if not exe.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        part = exe.with_name(exe.name + f".{os.getpid()}")
        _build_native(sources(tree), part, [*LUA_CFLAGS, *flags])
        os.replace(part, exe)
    return exe
