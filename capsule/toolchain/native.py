"""The same C/C++ sources built natively with gcc/g++: the reference a guest's output is compared with.

``build_native`` compiles and links in one gcc run (small programs); ``build_native_cached`` compiles each
source on its own through the object cache (``capsule.toolchain.objects``: by content, side by side) and
keeps the linked program by the objects' contents, which is what the large third-party programs (SQLite,
DOOM, QuickJS) need to stay quick after their first build.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from capsule.toolchain.cache import cache_dir
from capsule.toolchain.clang import ToolchainError, tool
from capsule.toolchain.guest import GUEST_DIR, Source, is_cxx
from capsule.toolchain.objects import Job, compile_objects, compiler_version, sha256_bytes
from capsule.toolchain.progress import Progress, no_progress

NATIVE_VERSION = 1  # bump when the recipe below changes, so old programs are not reused


def build_native(sources: Sequence[str | Path], output: str | Path, flags: Sequence[str] = ()) -> Path:
    """Build ``sources`` with gcc (g++ when one is C++) into the executable ``output``, with the guest's
    ``crt`` headers (capsule.h) on the include path so a program written for capsule builds unchanged."""
    srcs = [Path(s) for s in sources]
    cxx = any(is_cxx(s) for s in srcs)
    compiler = tool("g++" if cxx else "gcc")
    extra = ["-fno-exceptions"] if cxx else []
    cmd = [compiler, *extra, f"-I{GUEST_DIR / 'crt'}", *flags, *map(str, srcs), "-o", str(output), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"{compiler} could not build {', '.join(s.name for s in srcs)}:\n{res.stderr.rstrip()}")
    return Path(output)


def build_native_cached(sources: Sequence[str | Path | Source], flags: Sequence[str] = (), *, name: str,
                        cache: Path | None = None, workers: int | None = None,
                        progress: Progress = no_progress) -> Path:
    """The native build of ``sources`` (a ``Source`` adds flags of its own), each compiled through the object
    cache and linked once per set of objects: ``<cache>/native/<name>-<key>``. Flags go to every compile
    and to the link (gcc ignores what does not concern it)."""
    srcs = [s if isinstance(s, Source) else Source(Path(s)) for s in sources]
    cxx = any(is_cxx(s.path) for s in srcs)
    compiler = tool("g++" if cxx else "gcc")
    base = ["-fno-exceptions"] if cxx else []
    root = cache or cache_dir("build")
    jobs = [Job(tool("g++" if is_cxx(s.path) else "gcc"),
                (*base, f"-I{GUEST_DIR / 'crt'}", *flags, *s.flags), s.path) for s in srcs]
    objs = compile_objects(jobs, root / "native-obj", workers=workers, progress=progress)
    key = sha256_bytes(json.dumps([NATIVE_VERSION, compiler_version(compiler), list(flags),
                                   [o.digest for o in objs]]).encode())[:16]
    exe = root / "native" / f"{name}-{key}"
    if exe.is_file():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    part = exe.with_name(f"{exe.name}.{os.getpid()}.part")
    cmd = [compiler, *base, *flags, *(str(o.path) for o in objs), "-o", str(part), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise ToolchainError(f"{compiler} could not link {name}:\n{res.stderr.rstrip()}")
    os.replace(part, exe)
    return exe
