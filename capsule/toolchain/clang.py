"""Finding the external compilers (clang-19, clang++-19, gcc), and clang-19 for C to BPF."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path


class ToolchainError(Exception):
    """A compiler is missing or refused the input; the message carries its diagnostics."""


def tool(name: str) -> str:
    """The path of the program ``name``; ToolchainError, saying how to install it, when it is missing."""
    path = shutil.which(name)
    if path is None:
        raise ToolchainError(f"{name} is not installed (run `make demo` or scripts/setup.sh to install the toolchain)")
    return path


def clang() -> str:
    return tool("clang-19")


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
