"""wasm3 0.5.0 (a WebAssembly interpreter) from the ``pywasm3`` sdist on PyPI, and the recipe that builds a
``wasm3`` command the same way natively (gcc) and for capsule: a wasm interpreter compiled from wasm,
interpreting a wasm module inside the guest.

Where the sources come from: ``pywasm3`` 0.5.0 (Python bindings) carries wasm3's engine in ``wasm3/``; only
that folder's ``.c``/``.h`` files are unpacked, as ``wasm3-0.5.0`` in the source cache. The sdist has no
command-line app, so the front end is capsule's own (``capsule/guest/programs/wasm3_run.c``: ``wasm3 FILE
FUNCTION [ARGS...]`` prints the results), compiled into both builds. The flags are the bindings' own
(``setup.py``), at -O2 instead of -O3 on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capsule.sources.fetch import cache_root, stamped
from capsule.sources.pypi import fetch_c_dir
from capsule.toolchain.guest import GUEST_DIR
from capsule.toolchain.guest import build_wasm as _build_wasm
from capsule.toolchain.native import build_native_cached
from capsule.toolchain.progress import Progress, no_progress

WASM3_VERSION = "0.5.0"
SDIST_PROJECT = "pywasm3"
SDIST = "pywasm3-0.5.0.tar.gz"
SDIST_SHA256 = "5a47c8a39f7f6ae71b3316b2e5d86c9d0db6e771a65f09a86e4d4aa3a19aefcc"
SDIST_DIR = "pywasm3-0.5.0/wasm3"
ENGINE = ("m3_bind", "m3_code", "m3_compile", "m3_core", "m3_emit", "m3_env", "m3_exec", "m3_function",
          "m3_info", "m3_module", "m3_parse")
FRONT_END = GUEST_DIR / "programs" / "wasm3_run.c"
# the bindings' setup.py (without -O3 -g0: capsule's -O2), both builds
CFLAGS = ("-O2", "-fomit-frame-pointer", "-fno-stack-check", "-fno-stack-protector", "-DDEBUG", "-DNASSERTS",
          "-Dd_m3RecordBacktraces=1")
WARNINGS = ("-w",)


def tree_name() -> str:
    return f"wasm3-{WASM3_VERSION}"


def cached(root: Path | None = None) -> Path | None:
    return stamped((root or cache_root()) / tree_name(), SDIST_SHA256)


def fetch(root: Path | None = None) -> Path:
    """wasm3's source tree, fetched once and cached. Raises RegistryUnavailable when it is not cached and PyPI
    cannot be reached, FetchError when the download does not match its checksums."""
    return fetch_c_dir(SDIST_PROJECT, SDIST, SDIST_SHA256, SDIST_DIR, (root or cache_root()) / tree_name(),
                       [*(f"{name}.c" for name in ENGINE), "wasm3.h"])


def sources(tree: Path) -> list[Path]:
    """The engine's C files and capsule's front end."""
    return [*(tree / f"{name}.c" for name in ENGINE), FRONT_END]


def build_wasm(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """``wasm3`` as a wasm32-wasi module with capsule's runtime (objects cached by content)."""
    return _build_wasm(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], progress=progress).wasm


def build_native(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """The same ``wasm3`` built natively with gcc (the reference), cached."""
    return build_native_cached(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], name="wasm3",
                               progress=progress)
