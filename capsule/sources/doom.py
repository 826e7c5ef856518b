"""DOOM: doomgeneric (the portable DOOM engine) from the ``cydoomgeneric`` 0.1.0 sdist on PyPI, Freedoom's
``freedoom1.wad`` from Debian's ``freedoom`` package, and the recipe that builds a headless DOOM the same way
natively (gcc) and for capsule.

Where the sources come from: ``cydoomgeneric`` (Python bindings) carries doomgeneric in ``doomgeneric/``;
only that folder's ``.c``/``.h`` files are unpacked, as ``doomgeneric-0.1.0`` in the source cache. The
engine is the 80 files the bindings' ``setup.py`` compiles, with its definitions for Linux (``NORMALUNIX``,
``LINUX``, ``_DEFAULT_SOURCE``). doomgeneric leaves the platform to its user: capsule's is
``capsule/guest/programs/doom_headless.c`` (no window, no sound, a virtual clock, scripted input, frames
handed to the host: see that file), compiled into both builds.

The WAD: Debian's ``freedoom`` 0.12.1-2 (bookworm) binary package, fetched with ``apt-get download`` and
checked against the ``.deb``'s pinned SHA-256 (``capsule.sources.apt.debian_binary``); only
``usr/share/games/doom/freedoom1.wad`` is kept, and it is checked against its own pin.

One flag for one file: doomgeneric's ``i_video.c`` calls ``I_InitInput`` as ``int (void)`` while
``i_input.c`` defines it ``void (void)``; wasm-ld turns a call through a mismatched signature into a trap,
so ``i_video.c`` alone is compiled with ``-DI_InitInput=capsule_doom_init_input`` (the platform file makes
the call with the right type). The sources themselves are not changed; the native build gets the same flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capsule.sources.apt import DebianBinary, debian_binary
from capsule.sources.fetch import FetchError, cache_root, sha256_file, stamped
from capsule.sources.pypi import fetch_c_dir
from capsule.toolchain.guest import GUEST_DIR, Source
from capsule.toolchain.guest import build_wasm as _build_wasm
from capsule.toolchain.native import build_native_cached
from capsule.toolchain.progress import Progress, no_progress

DOOMGENERIC_VERSION = "0.1.0"  # the sdist's version: doomgeneric itself has no releases
SDIST_PROJECT = "cydoomgeneric"
SDIST = "cydoomgeneric-0.1.0.tar.gz"
SDIST_SHA256 = "b6d59939d06354f8afb61dcb760bf856423b308c7ae0c0f9781fbd174b2b0d72"
SDIST_DIR = "cydoomgeneric-0.1.0/doomgeneric"
FREEDOOM = DebianBinary("freedoom", "0.12.1-2", "c5b7cf1aa6dde8c980271981ce75b9b4a9e7b634b9db93d471f54bab7a8e1290")
WAD_MEMBER = "usr/share/games/doom/freedoom1.wad"
WAD_SHA256 = "84c3a912f2973892a8025d09d65f5053b1ee2304968a5a172526d683a185b885"
WAD_NAME = "freedoom1.wad"
PLATFORM = GUEST_DIR / "programs" / "doom_headless.c"
# cydoomgeneric's setup.py, in its order
ENGINE = ("am_map", "d_event", "d_items", "d_iwad", "d_loop", "d_main", "d_mode", "d_net", "doomdef", "doomgeneric",
          "doomstat", "dstrings", "dummy", "f_finale", "f_wipe", "g_game", "hu_lib", "hu_stuff", "i_cdmus",
          "i_endoom", "i_input", "i_joystick", "i_scale", "i_sound", "i_system", "i_timer", "i_video", "info",
          "m_argv", "m_bbox", "m_cheat", "m_config", "m_controls", "m_fixed", "m_menu", "m_misc", "m_random",
          "memio", "p_ceilng", "p_doors", "p_enemy", "p_floor", "p_inter", "p_lights", "p_map", "p_maputl",
          "p_mobj", "p_plats", "p_pspr", "p_saveg", "p_setup", "p_sight", "p_spec", "p_switch", "p_telept",
          "p_tick", "p_user", "r_bsp", "r_data", "r_draw", "r_main", "r_plane", "r_segs", "r_sky", "r_things",
          "s_sound", "sha1", "sounds", "st_lib", "st_stuff", "statdump", "tables", "v_video", "w_checksum",
          "w_file", "w_file_stdc", "w_main", "w_wad", "wi_stuff", "z_zone")
CFLAGS = ("-O2", "-DNORMALUNIX", "-DLINUX", "-D_DEFAULT_SOURCE")
WARNINGS = ("-w",)  # 1990s C: its warnings are DOOM's, not the build's
SIGNATURE_FIX = {"i_video": ("-DI_InitInput=capsule_doom_init_input",)}


def tree_name() -> str:
    return f"doomgeneric-{DOOMGENERIC_VERSION}"


def cached(root: Path | None = None) -> Path | None:
    """The unpacked tree if it is in the cache (complete, from the pinned sdist), else None."""
    return stamped((root or cache_root()) / tree_name(), SDIST_SHA256)


def fetch(root: Path | None = None) -> Path:
    """doomgeneric's source tree, fetched once and cached. Raises RegistryUnavailable when it is not cached and
    PyPI cannot be reached, FetchError when the download does not match its checksums."""
    return fetch_c_dir(SDIST_PROJECT, SDIST, SDIST_SHA256, SDIST_DIR, (root or cache_root()) / tree_name(),
                       [f"{name}.c" for name in ENGINE])


def wad(root: Path | None = None) -> Path:
    """``freedoom1.wad`` (Freedoom: Phase 1), from Debian's package, checked against its pin."""
    path = debian_binary(FREEDOOM, [WAD_MEMBER], root) / WAD_MEMBER
    got = sha256_file(path)
    if got != WAD_SHA256:
        raise FetchError(f"{path}: SHA-256 {got}, capsule pins {WAD_SHA256} for {WAD_NAME}")
    return path


def sources(tree: Path) -> list[Source]:
    """The engine's C files (``i_video.c`` with its signature fix) and capsule's platform layer."""
    return [*(Source(tree / f"{name}.c", SIGNATURE_FIX.get(name, ())) for name in ENGINE), Source(PLATFORM)]


def build_wasm(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """The headless DOOM as a wasm32-wasi module with capsule's runtime (objects cached by content)."""
    return _build_wasm(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], progress=progress).wasm


def build_native(tree: Path, flags: Sequence[str] = (), progress: Progress = no_progress) -> Path:
    """The same DOOM built natively with gcc (the reference), cached."""
    return build_native_cached(sources(tree), [*CFLAGS, *WARNINGS, f"-I{tree}", *flags], name="doom",
                               progress=progress)
