"""C and C++ to wasm32-wasi with capsule's guest runtime linked in, cached by content.

The program is compiled by clang-19 (``--target=wasm32-wasi``, Debian's wasi-libc, libc++ without exceptions
for C++) against capsule's guest headers and linked with capsule's WASI runtime and libc layer
(``capsule/guest``): the runtime defines every ``__imported_wasi_snapshot_preview1_*`` function wasi-libc
calls, so the result imports nothing but the ``capsule.*`` intrinsics the compiler lowers inline, and the libc
layer (``guest/libc``, headers in ``guest/include``) gives what wasi-libc lacks and ordinary programs call
(``system``, ``chmod``, ``realpath``, ``getpid``, ``<pthread.h>``, the names of the ``FE_*`` rounding modes).
wasi-libc's own emulations (``signal``, process clocks, ``mmap``) are always on. User flags pass through to
clang (``-I -D -O -l -L -W -std=...``); without an ``-O`` the build is ``-O2``.

The include path is exactly capsule's headers, libc++ (C++), clang's own headers and wasi-libc: clang's
default for wasm32-wasi also searches ``/usr/local/include`` and ``/usr/include``, where a header wasi-libc
lacks (``pthread.h``, glibc's ``sys/epoll.h``) would silently come from the host's C library and fail far
from the cause; here it is "file not found", with a note saying where the guest's headers come from.

Caching (``cache_dir("build")``, see ``capsule.toolchain.cache``): every source is one object, compiled on its
own and cached by content (``capsule.toolchain.objects``), so a change to one file recompiles one file, and
the sources are compiled side by side, one per core; the linked module is cached by the objects' contents,
the link flags and the runtime's. ``progress`` hears of every object and of the link.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capsule.toolchain.cache import cache_dir
from capsule.toolchain.clang import ToolchainError, tool
from capsule.toolchain.objects import Job, compile_objects, compiler_version, sha256_bytes, sha256_path
from capsule.toolchain.progress import BuildEvent, Progress, no_progress
from capsule.wasm import VARS_SECTION

GUEST_DIR = Path(__file__).resolve().parent.parent / "guest"
GUEST_INCLUDE = GUEST_DIR / "include"  # capsule's headers: setjmp.h, pthread.h and wrappers of wasi-libc's
LIBC_DIR = GUEST_DIR / "libc"  # what those headers declare and wasi-libc does not define
#: Debian's wasi-libc and libc++ for wasm32 (packages wasi-libc, libc++-19-dev-wasm32)
WASI_INCLUDE = Path("/usr/include/wasm32-wasi")
WASI_CXX_INCLUDE = WASI_INCLUDE / "c++" / "v1"
RUNTIME_SOURCES = (
    GUEST_DIR / "wasi" / "wasi_io.c",
    GUEST_DIR / "wasi" / "memfs.c",
    GUEST_DIR / "wasi" / "memfs_path.c",
    GUEST_DIR / "crt" / "start.c",
    GUEST_DIR / "crt" / "sjlj.c",
)
#: the libc layer, one object per concern so that a program defining one of these itself keeps its own
LIBC_SOURCES = tuple(LIBC_DIR / f"{name}.c" for name in ("system", "chmod", "realpath", "getpid", "getpagesize",
                                                              "pthread", "errno", "locale", "paths"))
LIBC_ARCHIVE = "libcapsule.a"
#: wasi-libc functions the libc layer wraps at the link (libc/paths.c: the empty path is ENOENT; libc/errno.c:
#: stdio asking whether stdout is a terminal leaves errno alone)
LIBC_WRAPS = ("-Wl,--wrap=__wasilibc_find_relpath_alloc", "-Wl,--wrap=__isatty")
#: wasi-libc's emulations, on for every program: the macros make its headers declare the functions, the
#: archives define them (a program that uses none links none of their code)
WASI_EMULATIONS = ("signal", "process-clocks", "mman")
EMULATION_DEFINES = ("-D_WASI_EMULATED_SIGNAL", "-D_WASI_EMULATED_PROCESS_CLOCKS", "-D_WASI_EMULATED_MMAN",
                     "-D_WASI_EMULATED_GETPID")  # getpid itself is capsule's (guest/libc/getpid.c)
# A program for a hook (``build_wasm(hook=True)``): no _start (the host calls capsule_hook_start, then the
# handler), output to the ring buffer, malloc on a heap safe from every CPU at once; everything compiled with
# real atomics (wasm's threads proposal: clang otherwise lowers C11 atomics to plain loads and stores).
HOOK_RUNTIME_SOURCES = (
    GUEST_DIR / "wasi" / "wasi_io.c",
    GUEST_DIR / "wasi" / "memfs.c",
    GUEST_DIR / "wasi" / "memfs_path.c",
    GUEST_DIR / "crt" / "sjlj.c",
    GUEST_DIR / "hook" / "heap.c",
    GUEST_DIR / "hook" / "hook_rt.c",
)
# -fno-builtin-*: clang would turn fprintf(stdout, "text") into fwrite on the shared FILE, past the runtime's
# own fprintf, which writes one ring record per call from the calling fiber's stack
HOOK_FLAGS = ("-matomics", "-DCAPSULE_HOOK", "-fno-builtin-fprintf", "-fno-builtin-fputs")
TARGET = "wasm32-wasi"
#: the one set of source suffixes capsule builds (C++ gets clang++-19 and libc++); every command asks is_source
C_SUFFIXES = (".c",)
CXX_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C")
DEFAULT_OPT = "-O2"  # what a build without an -O flag is optimised at
DEFAULT_STACK = 1 << 20  # the C shadow stack (wasm-ld's default of 64 KiB overflows ordinary programs)
DEFAULT_MAX_MEMORY = 1 << 30  # memory.grow fails past this, so malloc returns NULL instead of exhausting the host
BUILD_VERSION = 3  # bump when the build recipe changes, so old cache entries are not reused
HEADER_NOTE = ("note: a capsule guest sees capsule's headers (capsule/guest/include), libc++, clang's own headers "
               f"and wasi-libc ({WASI_INCLUDE}); the host's /usr/include is not on its include path")


@dataclass(frozen=True)
class Source:
    """A source file with flags for it alone (``build_wasm`` takes these besides plain paths): for the rare
    program that needs a macro in one file only, such as DOOM's recipe (``capsule.sources.doom``)."""

    path: Path
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildResult:
    wasm: Path
    cached: bool  # nothing was compiled or linked
    diagnostics: str  # clang's warnings for what was compiled now (a cached object's are not repeated)
    compiled: tuple[str, ...] = ()  # the sources compiled by this build (the others came from the cache)


def is_source(path: str | Path) -> bool:
    return Path(path).suffix in C_SUFFIXES + CXX_SUFFIXES


def is_cxx(path: str | Path) -> bool:
    return Path(path).suffix in CXX_SUFFIXES


def runtime_digest() -> str:
    """The content hash of the guest runtime (its sources and headers, the libc layer's too)."""
    h = hashlib.sha256()
    for sub in ("wasi", "crt", "include", "libc", "hook"):
        for p in sorted((GUEST_DIR / sub).rglob("*")):
            if p.suffix in (".c", ".h"):
                h.update(p.relative_to(GUEST_DIR).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def include_flags(cxx: bool) -> list[str]:
    """The guest's whole include path, in order: capsule's headers (first, so that its wrappers are found
    before wasi-libc's), libc++ for C++, then clang's own headers (implicit), then wasi-libc (-idirafter)."""
    if not WASI_INCLUDE.is_dir():
        raise ToolchainError(f"wasi-libc is not installed ({WASI_INCLUDE} is missing; run `make demo` or "
                             "scripts/setup.sh)")
    flags = ["-nostdlibinc", "-isystem", str(GUEST_INCLUDE)]
    if cxx:
        flags += ["-isystem", str(WASI_CXX_INCLUDE)]
    return [*flags, "-idirafter", str(WASI_INCLUDE)]


@functools.cache
def guest_headers_tag() -> str:
    """A hash of the names of capsule's guest headers, on every compile's command line: a cached object is
    reused while the headers it read are unchanged (``-MD``), but a header added here shadows one of wasi-libc's
    that those objects read, which only a new key notices."""
    names = sorted(p.relative_to(GUEST_INCLUDE).as_posix() for p in GUEST_INCLUDE.rglob("*.h"))
    return hashlib.sha256("\0".join(names).encode()).hexdigest()[:12]


def wasm_flags(cxx: bool) -> list[str]:
    """Every guest compile's flags before the user's: the target, the include path, wasi-libc's emulations,
    and setjmp/longjmp lowered by clang (emscripten sjlj) onto invoke_* imports the compiler turns into
    unwind-catching calls."""
    flags = [f"--target={TARGET}", *include_flags(cxx), f"-I{GUEST_DIR / 'crt'}", *EMULATION_DEFINES,
             f"-D__CAPSULE_GUEST_HEADERS={guest_headers_tag()}",
             "-mllvm", "-enable-emscripten-sjlj", "-Wno-unused-command-line-argument"]
    if cxx:
        flags += ["-fno-exceptions"]
    return flags


def compile_flags(user: Sequence[str]) -> list[str]:
    """The user's flags as the compiler gets them: ``-O2`` first unless they choose a level."""
    return list(user) if any(f.startswith("-O") for f in user) else [DEFAULT_OPT, *user]


def _link_flags(user: Sequence[str], hook: bool = False) -> list[str]:
    """The flags of the final link: only those that mean something to the linker reach it."""
    keep = [f for f in compile_flags(user) if f.startswith(("-l", "-L", "-Wl,", "-O", "-g", "-f", "-m"))]
    # the table is exported for the reference engine's invoke_* (setjmp/longjmp) to call through; the C stack's
    # bounds for the runtime, which traps a stack pointer that leaves them (before the stack reaches the data)
    out = ["-nostartfiles", f"-Wl,-z,stack-size={DEFAULT_STACK}", "-Wl,--export-table",
           "-Wl,--export=__stack_low", "-Wl,--export=__stack_high", *LIBC_WRAPS]
    if hook:
        out.append("-Wl,--no-entry")
    if not any("--max-memory" in f for f in user):
        out.append(f"-Wl,--max-memory={DEFAULT_MAX_MEMORY}")
    return out + keep


def _sources(sources: Sequence[str | Path | Source]) -> list[Source]:
    srcs = [s if isinstance(s, Source) else Source(Path(s)) for s in sources]
    if not srcs:
        raise ToolchainError("no source files given")
    for s in srcs:
        if not s.path.is_file():
            raise ToolchainError(f"{s.path}: no such file")
        if not is_source(s.path):
            raise ToolchainError(f"{s.path}: not a C or C++ source ({', '.join(C_SUFFIXES + CXX_SUFFIXES)})")
    return srcs


def build_wasm(sources: Sequence[str | Path | Source], flags: Sequence[str] = (), *,
               output: str | Path | None = None, cache: Path | None = None, workers: int | None = None,
               progress: Progress = no_progress, hook: bool = False) -> BuildResult:
    """Build C/C++ ``sources`` (plus capsule's guest runtime) into a wasm32-wasi module.

    ``flags`` go to clang for every source (a ``Source`` adds its own) and, where they concern linking
    (``-l``, ``-L``, ``-Wl,``), to the link. Raises ToolchainError with clang's diagnostics when a source does
    not compile or link. ``output`` gets a copy of the result; the result itself lives in the cache.
    ``workers`` compiles run at once (default: one per core); ``progress`` hears of each object and the link.
    ``hook``: a program for an XDP or tc hook (``HOOK_RUNTIME_SOURCES``), whose global variables are exported
    by name (the host reads and writes them while it runs) with their sizes in a custom section
    (``VARS_SECTION``).
    """
    srcs = _sources(sources)
    cxx = any(is_cxx(s.path) for s in srcs)
    flags = [*HOOK_FLAGS, *flags] if hook else list(flags)
    root = cache or cache_dir("build")
    jobs = [Job(tool("clang++-19" if is_cxx(s.path) else "clang-19"),
                (*wasm_flags(is_cxx(s.path)), *compile_flags(flags), *s.flags), s.path) for s in srcs]
    try:
        objs = compile_objects(jobs, root / "obj", workers=workers, progress=progress)
    except ToolchainError as e:
        raise ToolchainError(_explain(str(e))) from None
    runtime = runtime_objects(root, hook=hook)
    linker = tool("clang++-19" if cxx else "clang-19")
    variables = _data_symbols([o.path for o in objs]) if hook else {}
    link = [*wasm_flags(cxx), *_link_flags(flags, hook), *(f"-Wl,--export={name}" for name in variables)]
    key = sha256_bytes(json.dumps([BUILD_VERSION, compiler_version(linker), link, WASI_EMULATIONS, hook,
                                   [o.digest for o in objs], [sha256_path(r) for r in runtime]]).encode())[:32]
    wasm = root / f"{key}.wasm"
    compiled = tuple(o.source.name for o in objs if not o.cached)
    diagnostics = "".join(o.diagnostics for o in objs)
    if wasm.is_file():
        progress(BuildEvent("link", 1, 1, wasm.name, cached=True))
        _copy_out(wasm, output)
        return BuildResult(wasm, not compiled, diagnostics, compiled)
    with tempfile.TemporaryDirectory(prefix="capsule-build-") as tmp:
        part = Path(tmp) / "out.wasm"
        cmd = [linker, *link, *(str(o.path) for o in objs), *map(str, runtime), *_emulation_libs(), "-o", str(part)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            names = ", ".join(s.path.name for s in srcs)
            message = res.stderr.rstrip()
            for o in objs:  # name the sources, not their objects in the cache
                message = message.replace(str(o.path), f"{o.source.name} (object)")
            raise ToolchainError(f"linking {names} failed:\n{message}")
        diagnostics += res.stderr
        if hook:
            with part.open("ab") as f:
                f.write(custom_section(VARS_SECTION, json.dumps(variables).encode()))
        os.replace(part, wasm)
    progress(BuildEvent("link", 1, 1, wasm.name))
    _copy_out(wasm, output)
    return BuildResult(wasm, False, diagnostics, compiled)


def _emulation_libs() -> list[str]:
    return [f"-lwasi-emulated-{name}" for name in WASI_EMULATIONS]


def _explain(message: str) -> str:
    """A compile error, with a note on where the guest's headers come from when one was not found."""
    if re.search(r"fatal error: '[^']+' file not found", message):
        return f"{message}\n{HEADER_NOTE}"
    return message


def _data_symbols(objs: Sequence[Path]) -> dict[str, int]:
    """The global variables the objects define, with their sizes in bytes (``llvm-nm``)."""
    res = subprocess.run([tool("llvm-nm-19"), "--defined-only", "--print-size", *map(str, objs)],
                         capture_output=True, text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"llvm-nm could not list the program's symbols:\n{res.stderr.rstrip()}")
    out: dict[str, int] = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in ("D", "B", "R"):
            out[parts[3]] = int(parts[1], 16)
    return out


def custom_section(name: str, payload: bytes) -> bytes:
    """A wasm custom section (id 0), to append to a module."""
    body = _leb(len(name.encode())) + name.encode() + payload
    return b"\0" + _leb(len(body)) + body


def _leb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _copy_out(wasm: Path, output: str | Path | None) -> None:
    if output is not None:
        shutil.copyfile(wasm, output)


def runtime_objects(root: Path | None = None, *, hook: bool = False) -> list[Path]:
    """The guest runtime compiled to wasm objects, and the libc layer as an archive (``libcapsule.a``: its
    members are linked only where the program does not define the function itself), cached by the runtime's
    content hash; ``hook``: the runtime of a hook program, compiled with its flags."""
    sources = HOOK_RUNTIME_SOURCES if hook else RUNTIME_SOURCES
    extra = HOOK_FLAGS if hook else ()
    d = (root or cache_dir("build")) / f"runtime-{'hook-' if hook else ''}{runtime_digest()[:16]}"
    objs = [d / f"{src.stem}.o" for src in sources]
    archive = d / LIBC_ARCHIVE
    if all(o.is_file() for o in objs) and archive.is_file():
        return [*objs, archive]
    d.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}.{threading.get_ident()}"
    for src, obj in zip(sources, objs, strict=True):
        _compile_runtime(src, obj, tag, extra)
    members = [d / f"libc-{src.stem}.o" for src in LIBC_SOURCES]
    for src, obj in zip(LIBC_SOURCES, members, strict=True):
        _compile_runtime(src, obj, tag, extra)
    part = archive.with_suffix(f".{tag}.part")
    res = subprocess.run([tool("llvm-ar-19"), "rcs", str(part), *map(str, members)], capture_output=True,
                         text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"capsule's libc layer cannot be archived:\n{res.stderr.rstrip()}")
    os.replace(part, archive)
    return [*objs, archive]


def _compile_runtime(src: Path, obj: Path, tag: str, extra: Sequence[str]) -> None:
    part = obj.with_suffix(f".{tag}.part")
    cmd = [tool("clang-19"), *wasm_flags(False), *extra, "-O2", "-Wall", "-Wextra", "-c", str(src), "-o", str(part)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"capsule's guest runtime does not compile ({src.name}):\n{res.stderr.rstrip()}")
    os.replace(part, obj)


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
            cmd = [tool("clang-19"), f"--target={TARGET}", "-nostdlibinc", "-idirafter", str(WASI_INCLUDE),
                   f"-I{GUEST_DIR / 'crt'}", "-O2", "-mbulk-memory",
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
