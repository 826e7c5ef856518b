"""Building test inputs for capsule.wasm: C via clang-19 --target=wasm32, wat text via wabt's wat2wasm.

Outputs are cached by content hash under ``.cache/tests/wasm`` (written atomically, so parallel workers can
share the cache).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CLANG = shutil.which("clang-19") or "clang-19"
WAT2WASM = shutil.which("wat2wasm") or "wat2wasm"
CACHE = Path(os.environ.get("CAPSULE_TEST_CACHE", Path(__file__).parents[2] / ".cache" / "tests")) / "wasm"
C_FLAGS = ["--target=wasm32", "-nostdlib", "-O2", "-mbulk-memory", "-Wl,--no-entry", "-Wl,--export-all"]


def _cached(kind: str, text: str, flags: list[str], build: list[str], suffix: str) -> Path:
    key = hashlib.sha256((text + repr(flags)).encode()).hexdigest()[:16]
    out = CACHE / f"{kind}-{key}.wasm"
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        src = Path(tmp) / f"input{suffix}"
        src.write_text(text)
        res = subprocess.run(
            [*build, *flags, str(src), "-o", str(Path(tmp) / "out.wasm")], capture_output=True, text=True
        )
        if res.returncode:
            raise RuntimeError(f"{build[0]} failed:\n{res.stderr}")
        os.replace(Path(tmp) / "out.wasm", out)
    return out


def compile_c(source: str, extra: list[str] | None = None) -> bytes:
    """C source text -> a linked wasm32 module (every function exported, a name section kept)."""
    return _cached("c", source, C_FLAGS + (extra or []), [CLANG], ".c").read_bytes()


def wat(text: str, extra: list[str] | None = None) -> bytes:
    """WebAssembly text -> binary, with ``--debug-names`` so $names land in the name section."""
    return _cached("wat", text, ["--debug-names", *(extra or [])], [WAT2WASM], ".wat").read_bytes()
