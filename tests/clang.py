"""Compiling C for tests: clang-19 to BPF (and wasm later), cached by content hash under the pytest cache."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from capsule.toolchain.clang import bpf_cflags, clang

CACHE = Path(os.environ.get("CAPSULE_TEST_CACHE", Path(__file__).parent.parent / ".cache" / "tests"))
CORPUS = Path(__file__).parent / "corpus"


def compile_bpf(src: Path | str, mcpu: str = "v4", extra: list[str] | None = None) -> Path:
    """Compile one C file (a path, or source text) to a BPF object; returns the cached .o path."""
    if isinstance(src, Path):
        text, name = src.read_bytes(), src.stem
    else:
        text, name = src.encode(), "inline"
    flags = bpf_cflags(mcpu) + (extra or [])
    key = hashlib.sha256(text + repr(flags).encode()).hexdigest()[:16]
    out = CACHE / f"{name}-{mcpu}-{key}.o"
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp_src = CACHE / f"{name}-{key}-{os.getpid()}.c"
    tmp_src.write_bytes(text)
    res = subprocess.run(
        [clang(), *flags, "-c", str(tmp_src), "-o", f"{out}.{os.getpid()}.tmp"],
        capture_output=True,
        text=True,
    )
    if res.returncode:
        raise RuntimeError(f"clang-19 failed on {name}:\n{res.stderr}")
    os.replace(f"{out}.{os.getpid()}.tmp", out)
    return out
