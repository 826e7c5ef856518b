"""The external compilers capsule drives: clang-19 for C to BPF (and, later, C to wasm32)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path


class ToolchainError(Exception):
    """A compiler is missing or refused the input; the message carries its diagnostics."""


def clang() -> str:
    path = shutil.which("clang-19")
    if path is None:
        raise ToolchainError("clang-19 is not installed (run `make demo` or scripts/setup.sh to install it)")
    return path


def bpf_cflags(mcpu: str = "v4") -> list[str]:
    """Flags for C to BPF the way libbpf projects build: -O2 -g (BTF), the target's uapi headers."""
    return [
        "-target",
        "bpf",
        f"-mcpu={mcpu}",
        "-O2",
        "-g",
        f"-I/usr/include/{platform.machine()}-linux-gnu",
        "-Wall",
        "-Wno-unused-function",
    ]


def compile_bpf(src: Path, out: Path, *, mcpu: str = "v4", extra: list[str] | None = None) -> Path:
    res = subprocess.run(
        [clang(), *bpf_cflags(mcpu), *(extra or []), "-c", str(src), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    if res.returncode:
        raise ToolchainError(f"clang-19 could not compile {src}:\n{res.stderr.rstrip()}")
    return out
