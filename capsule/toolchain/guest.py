"""C and C++ to wasm32-wasi with capsule's guest runtime linked in, cached by content hash.

The program is compiled by clang-19 (``--target=wasm32-wasi``, Debian's wasi-libc sysroot, libc++ without
exceptions for C++) and linked with capsule's WASI runtime (``capsule/guest``): the runtime defines every
``__imported_wasi_snapshot_preview1_*`` function wasi-libc calls, so the result imports nothing but the four
``capsule.*`` intrinsics the compiler lowers inline. User flags pass through to clang (``-I -D -O -l -L -W
-std=...``).

Builds are cached in ``cache_dir("build")`` (``~/.cache/capsule/build``; see ``capsule.toolchain.cache``): the
key hashes the sources, flags, runtime sources and clang's version; a hit is only used when every file the
last build read (headers included, from clang's dependency output) still has the same content.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from capsule.toolchain.cache import cache_dir
from capsule.toolchain.clang import ToolchainError, tool

GUEST_DIR = Path(__file__).resolve().parent.parent / "guest"
RUNTIME_SOURCES = (
    GUEST_DIR / "wasi" / "wasi_io.c",
    GUEST_DIR / "wasi" / "memfs.c",
    GUEST_DIR / "wasi" / "memfs_path.c",
    GUEST_DIR / "crt" / "start.c",
    GUEST_DIR / "crt" / "sjlj.c",
)
TARGET = "wasm32-wasi"
#: the one set of source suffixes capsule builds (C++ gets clang++-19 and libc++); every command asks is_source
C_SUFFIXES = (".c",)
CXX_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C")
DEFAULT_STACK = 1 << 20  # the C shadow stack (wasm-ld's default of 64 KiB overflows ordinary programs)
DEFAULT_MAX_MEMORY = 1 << 30  # memory.grow fails past this, so malloc returns NULL instead of exhausting the host
BUILD_VERSION = 2  # bump when the build recipe changes, so old cache entries are not reused


@dataclass(frozen=True)
class BuildResult:
    wasm: Path
    cached: bool
    diagnostics: str  # clang's warnings (empty when cached)


def is_source(path: str | Path) -> bool:
    return Path(path).suffix in C_SUFFIXES + CXX_SUFFIXES


def is_cxx(path: str | Path) -> bool:
    return Path(path).suffix in CXX_SUFFIXES


@cache
def _clang_version() -> str:
    res = subprocess.run([tool("clang-19"), "--version"], capture_output=True, text=True, check=False)
    return res.stdout.splitlines()[0] if res.stdout else "?"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def runtime_digest() -> str:
    """The content hash of the guest runtime (its sources and headers)."""
    h = hashlib.sha256()
    for p in sorted([*(GUEST_DIR / "wasi").rglob("*"), *(GUEST_DIR / "crt").rglob("*"),
                     *(GUEST_DIR / "include").rglob("*")]):
        if p.suffix in (".c", ".h"):
            h.update(p.relative_to(GUEST_DIR).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def wasm_flags(cxx: bool) -> list[str]:
    # include/ first: it has what wasi-libc lacks (setjmp.h); setjmp/longjmp are lowered by clang (emscripten
    # sjlj) onto invoke_* imports the compiler turns into unwind-catching calls
    flags = [f"--target={TARGET}", f"-I{GUEST_DIR / 'include'}", f"-I{GUEST_DIR / 'crt'}",
             "-mllvm", "-enable-emscripten-sjlj", "-Wno-unused-command-line-argument"]
    if cxx:
        flags += ["-fno-exceptions"]
    return flags


def _compile(src: Path, obj: Path, flags: Sequence[str], cxx: bool) -> tuple[str, list[Path]]:
    """Compile one source; return clang's diagnostics and the files it read."""
    dep = obj.with_suffix(".d")
    compiler = tool("clang++-19" if cxx else "clang-19")
    cmd = [compiler, *wasm_flags(cxx), *flags, "-MD", "-MF", str(dep), "-c", str(src), "-o", str(obj)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"{src.name} does not compile:\n{res.stderr.rstrip()}")
    return res.stderr, _read_deps(dep)


def _read_deps(dep: Path) -> list[Path]:
    text = dep.read_text().replace("\\\n", " ")
    _, _, rest = text.partition(":")
    return [Path(tok) for tok in rest.split() if tok]


def _link_flags(user: Sequence[str]) -> list[str]:
    """The flags of the final link: only those that mean something to the linker reach it."""
    keep = [f for f in user if f.startswith(("-l", "-L", "-Wl,", "-O", "-g", "-f", "-m"))]
    # the table is exported for the reference engine's invoke_* (setjmp/longjmp) to call through; the C stack's
    # bounds for the runtime, which traps a stack pointer that leaves them (before the stack reaches the data)
    out = ["-nostartfiles", f"-Wl,-z,stack-size={DEFAULT_STACK}", "-Wl,--export-table",
           "-Wl,--export=__stack_low", "-Wl,--export=__stack_high"]
    if not any("--max-memory" in f for f in user):
        out.append(f"-Wl,--max-memory={DEFAULT_MAX_MEMORY}")
    return out + keep


def build_wasm(sources: Sequence[str | Path], flags: Sequence[str] = (), *, output: str | Path | None = None,
               cache: Path | None = None) -> BuildResult:
    """Build C/C++ ``sources`` (plus capsule's guest runtime) into a wasm32-wasi module.

    ``flags`` go to clang for every source and, where they concern linking (``-l``, ``-L``, ``-Wl,``), to the
    link. Raises ToolchainError with clang's diagnostics when a source does not compile or link. ``output``
    gets a copy of the result; the result itself lives in the cache.
    """
    srcs = [Path(s) for s in sources]
    if not srcs:
        raise ToolchainError("no source files given")
    for s in srcs:
        if not s.is_file():
            raise ToolchainError(f"{s}: no such file")
        if not is_source(s):
            raise ToolchainError(f"{s}: not a C or C++ source ({', '.join(C_SUFFIXES + CXX_SUFFIXES)})")
    cxx = any(is_cxx(s) for s in srcs)
    flags = list(flags)
    root = cache or cache_dir("build")
    h = hashlib.sha256()
    h.update(json.dumps([BUILD_VERSION, _clang_version(), runtime_digest(), flags, cxx]).encode())
    for s in srcs:
        h.update(s.name.encode() + b"\0" + _sha(s.read_bytes()).encode())
    key = h.hexdigest()[:32]
    wasm = root / f"{key}.wasm"
    manifest = root / f"{key}.json"
    if wasm.is_file() and manifest.is_file() and _deps_unchanged(manifest):
        _copy_out(wasm, output)
        return BuildResult(wasm, True, "")
    root.mkdir(parents=True, exist_ok=True)
    diagnostics: list[str] = []
    deps: set[Path] = set()
    with tempfile.TemporaryDirectory(prefix="capsule-build-") as tmp:
        objs = []
        for i, s in enumerate(srcs):
            obj = Path(tmp) / f"{i}-{s.stem}.o"
            diag, read = _compile(s, obj, flags, is_cxx(s))
            diagnostics.append(diag)
            deps.update(read)
            objs.append(obj)
        objs += runtime_objects(root)
        linker = tool("clang++-19" if cxx else "clang-19")
        part = Path(tmp) / "out.wasm"
        cmd = [linker, *wasm_flags(cxx), *_link_flags(flags), *map(str, objs), "-o", str(part)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            raise ToolchainError(f"linking {', '.join(s.name for s in srcs)} failed:\n{res.stderr.rstrip()}")
        diagnostics.append(res.stderr)
        os.replace(part, wasm)
    record = {str(d.resolve()): _sha(d.read_bytes()) for d in deps if d.is_file()}
    manifest.write_text(json.dumps({"deps": record}))
    _copy_out(wasm, output)
    return BuildResult(wasm, False, "".join(diagnostics))


def _deps_unchanged(manifest: Path) -> bool:
    try:
        deps = json.loads(manifest.read_text())["deps"]
        return all(_sha(Path(p).read_bytes()) == digest for p, digest in deps.items())
    except (OSError, ValueError, KeyError):
        return False


def _copy_out(wasm: Path, output: str | Path | None) -> None:
    if output is not None:
        shutil.copyfile(wasm, output)


def runtime_objects(root: Path | None = None) -> list[Path]:
    """The guest runtime compiled to wasm objects (cached by the runtime's content hash)."""
    d = (root or cache_dir("build")) / f"runtime-{runtime_digest()[:16]}"
    objs = [d / f"{src.stem}.o" for src in RUNTIME_SOURCES]
    if all(o.is_file() for o in objs):
        return objs
    d.mkdir(parents=True, exist_ok=True)
    for src, obj in zip(RUNTIME_SOURCES, objs, strict=True):
        part = obj.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
        cmd = [tool("clang-19"), *wasm_flags(False), "-O2", "-Wall", "-Wextra", "-c", str(src), "-o", str(part)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            raise ToolchainError(f"capsule's guest runtime does not compile ({src.name}):\n{res.stderr.rstrip()}")
        os.replace(part, obj)
    return objs


# -- the runtime as a module of its own, for wasm32-wasi programs built elsewhere ------------------------------
STANDALONE_DIR = GUEST_DIR / "wasi_standalone"
STANDALONE_SOURCES = (
    GUEST_DIR / "wasi" / "wasi_io.c",
    GUEST_DIR / "wasi" / "memfs.c",
    GUEST_DIR / "wasi" / "memfs_path.c",
    STANDALONE_DIR / "standalone.c",
)
STANDALONE_STACK = 64 << 10  # the runtime's own C stack (its functions keep little on it)
#: every wasi_snapshot_preview1 function; the runtime exports those it defines under their C names
WASI_PREVIEW1 = (
    "args_get args_sizes_get environ_get environ_sizes_get clock_res_get clock_time_get fd_advise fd_allocate "
    "fd_close fd_datasync fd_fdstat_get fd_fdstat_set_flags fd_fdstat_set_rights fd_filestat_get "
    "fd_filestat_set_size fd_filestat_set_times fd_pread fd_prestat_get fd_prestat_dir_name fd_pwrite fd_read "
    "fd_readdir fd_renumber fd_seek fd_sync fd_tell fd_write path_create_directory path_filestat_get "
    "path_filestat_set_times path_link path_open path_readlink path_remove_directory path_rename path_symlink "
    "path_unlink_file poll_oneoff proc_exit proc_raise sched_yield random_get sock_accept sock_recv sock_send "
    "sock_shutdown"
).split()


def _standalone_digest() -> str:
    h = hashlib.sha256(runtime_digest().encode())
    for p in sorted(STANDALONE_DIR.rglob("*")):
        if p.suffix in (".c", ".h"):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def build_standalone_runtime(base: int, root: Path | None = None) -> Path:
    """capsule's WASI runtime as a module of its own, linked to live from address ``base`` up (data, then its
    stack; its heap grows with memory.grow), importing its memory and exporting every WASI function it
    serves (as ``__imported_wasi_snapshot_preview1_*``) plus the host protocol (``capsule_io``, ...).

    It is the same C as the runtime linked into capsule's own builds, compiled without wasi-libc (with
    ``wasi_standalone/standalone.c`` for the few libc functions it uses) and with bulk memory, so that
    ``capsule.wasm.link`` can merge it into a program built elsewhere. Objects are cached by the sources'
    content hash, linked modules by that and ``base``.
    """
    if base <= 0 or base % 65536:
        raise ToolchainError(f"the runtime's base {base:#x} must be a positive multiple of the wasm page size")
    d = (root or cache_dir("build")) / f"runtime-standalone-{_standalone_digest()[:16]}"
    out = d / f"rt-{base:x}.wasm"
    if out.is_file():
        return out
    d.mkdir(parents=True, exist_ok=True)
    objs = []
    for src in STANDALONE_SOURCES:
        obj = d / f"{src.stem}.o"
        if not obj.is_file():
            part = obj.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
            # -fno-builtin: standalone.c defines memcpy & co., which must not be compiled into calls to themselves
            extra = ["-fno-builtin"] if src.parent == STANDALONE_DIR else []
            cmd = [tool("clang-19"), f"--target={TARGET}", f"-I{GUEST_DIR / 'crt'}", "-O2", "-mbulk-memory",
                   "-Wall", "-Wextra", *extra, "-c", str(src), "-o", str(part)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode:
                raise ToolchainError(f"capsule's standalone WASI runtime does not compile ({src.name}):\n"
                                     f"{res.stderr.rstrip()}")
            os.replace(part, obj)
        objs.append(obj)
    part = out.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
    exports = [f"-Wl,--export-if-defined=__imported_wasi_snapshot_preview1_{n}" for n in WASI_PREVIEW1]
    cmd = [tool("clang-19"), f"--target={TARGET}", "-nostdlib", "-Wl,--no-entry", "-Wl,--import-memory",
           f"-Wl,--global-base={base}", f"-Wl,-z,stack-size={STANDALONE_STACK}", *exports, *map(str, objs),
           "-o", str(part)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"capsule's standalone WASI runtime does not link:\n{res.stderr.rstrip()}")
    os.replace(part, out)
    return out
