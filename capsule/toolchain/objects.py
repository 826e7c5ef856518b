"""Sources to objects: one compiler run per source, cached by content, several at once.

An object's key hashes what decides its bytes and is known before compiling: the compiler and its version,
the whole command line, the source's path as given (it is ``__FILE__``) and its contents, and the working
directory (a relative source path or ``-I`` resolves against it). Headers are known only after compiling, so
the compiler's list of the files it read (``-MD``) is kept beside the object with each file's SHA-256, and a
cached object is used only while every one of them has that content: a change to one header recompiles the
sources that include it and no other.

Compiles run side by side, one per core (they are separate processes: threads only wait for them), and each
finished one is reported to the build's ``Progress`` callback, from the calling thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from capsule.toolchain.clang import ToolchainError
from capsule.toolchain.progress import BuildEvent, Progress, no_progress

OBJECT_VERSION = 1  # bump when what goes into a key changes, so old objects are not reused


@dataclass(frozen=True)
class Job:
    """Compile ``source`` with ``compiler`` and ``flags`` (everything between the compiler and ``-c``)."""

    compiler: str
    flags: tuple[str, ...]
    source: Path


@dataclass(frozen=True)
class Obj:
    """A compiled object: where it is in the cache, the SHA-256 of its bytes, whether it was there already,
    and the compiler's warnings (empty for a cached object)."""

    source: Path
    path: Path
    digest: str
    cached: bool
    diagnostics: str


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_path(path: Path) -> str:
    return sha256_bytes(path.read_bytes())


@cache
def compiler_version(compiler: str) -> str:
    """The first line of ``compiler --version`` (part of every key: another compiler makes other objects)."""
    res = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return res.stdout.splitlines()[0] if res.stdout else "?"


def object_key(job: Job) -> str:
    try:
        content = sha256_path(job.source)
    except OSError as e:
        raise ToolchainError(f"{job.source}: {e.strerror}") from None
    text = json.dumps([OBJECT_VERSION, job.compiler, compiler_version(job.compiler), list(job.flags),
                       str(job.source), os.getcwd(), content])
    return sha256_bytes(text.encode())[:32]


def compile_objects(jobs: Sequence[Job], root: Path, *, workers: int | None = None,
                    progress: Progress = no_progress) -> list[Obj]:
    """Compile every job (or find it in the cache under ``root``), ``workers`` at a time (default: one per
    core); the objects in the order of ``jobs``. The first source that does not compile raises ToolchainError
    with the compiler's diagnostics, after the compiles already running have finished."""
    if not jobs:
        return []
    root.mkdir(parents=True, exist_ok=True)
    keys = [object_key(j) for j in jobs]
    out: list[Obj | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=min(len(jobs), workers or os.cpu_count() or 1)) as pool:
        pending: dict[Future[Obj], int] = {pool.submit(_one, j, k, root): i
                                           for i, (j, k) in enumerate(zip(jobs, keys, strict=True))}
        done = 0
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            failed = [f for f in finished if f.exception() is not None]
            if failed:
                for f in pending:
                    f.cancel()
                first = min(failed, key=lambda f: pending[f])
                raise first.exception()  # type: ignore[misc]
            for f in sorted(finished, key=lambda f: pending[f]):
                i = pending.pop(f)
                obj = out[i] = f.result()
                done += 1
                progress(BuildEvent("compile", done, len(jobs), jobs[i].source.name, obj.cached))
    return [o for o in out if o is not None]


def _one(job: Job, key: str, root: Path) -> Obj:
    obj = root / key[:2] / f"{key}.o"
    manifest = obj.with_suffix(".json")
    if obj.is_file() and _deps_unchanged(manifest):
        return Obj(job.source, obj, sha256_path(obj), True, "")
    obj.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}.{threading.get_ident()}"
    part, dep = obj.with_name(f"{key}.{tag}.part.o"), obj.with_name(f"{key}.{tag}.d")
    cmd = [job.compiler, *job.flags, "-MD", "-MF", str(dep), "-c", str(job.source), "-o", str(part)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            raise ToolchainError(f"{job.source.name} does not compile:\n{res.stderr.rstrip()}")
        deps = read_deps(dep)
    finally:
        dep.unlink(missing_ok=True)
    record = {str(d.resolve()): sha256_path(d) for d in deps if d.is_file()}
    os.replace(part, obj)
    manifest.write_text(json.dumps({"source": str(job.source), "deps": record}))
    return Obj(job.source, obj, sha256_path(obj), False, res.stderr)


def read_deps(dep: Path) -> list[Path]:
    """The files a ``-MD`` dependency file names (after the target's colon; line continuations joined)."""
    text = dep.read_text().replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    return [Path(tok.replace("\\ ", " ")) for tok in re.findall(r"(?:\\.|[^\s\\])+", rest)]


def _deps_unchanged(manifest: Path) -> bool:
    try:
        deps = json.loads(manifest.read_text())["deps"]
        return all(sha256_path(Path(p)) == digest for p, digest in deps.items())
    except (OSError, ValueError, KeyError):
        return False
