"""The same C/C++ sources built natively with gcc/g++: the reference a guest's output is compared with."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from capsule.toolchain.clang import ToolchainError, tool
from capsule.toolchain.guest import GUEST_DIR, is_cxx


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
