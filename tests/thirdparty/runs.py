"""Running a third-party program natively and as a capsule guest with exactly the same inputs, and comparing.

Both sides see the same argv (argv[0] included), the same environment, the same files in their working
directory (natively a fresh directory, in the guest the root of its file system) and the same stdin; what
each wrote (stdout, stderr, exit status, the files it created or changed) comes back as a ``Run``.
"""

from __future__ import annotations

import difflib
import io
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.testing.engines import open_guest

TIMEOUT_S = 300


@dataclass
class Run:
    stdout: bytes
    stderr: bytes
    code: int
    files: dict[str, bytes] = field(default_factory=dict)  # created or changed, by path relative to the cwd
    seconds: float = 0.0  # the run itself (for the guest: without compiling and loading)
    load_seconds: float = 0.0  # the guest's compile to BPF and load (kernel), or instantiation (wasmtime)


def _place(root: Path, files: dict[str, bytes]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def native(exe: Path, argv: list[str], *, cwd: Path, env: dict[str, str], files: dict[str, bytes] | None = None,
           stdin: bytes = b"") -> Run:
    files = files or {}
    _place(cwd, files)
    t0 = time.perf_counter()
    res = subprocess.run(argv, executable=str(exe), cwd=cwd, env=env, input=stdin, capture_output=True,
                         timeout=TIMEOUT_S, check=False)
    seconds = time.perf_counter() - t0
    changed = {rel: data for rel, data in _tree(cwd).items() if files.get(rel) != data}
    return Run(res.stdout, res.stderr, res.returncode & 0xFF, changed, seconds)


def guest(wasm: Path, argv: list[str], *, engine: str, tmp: Path, env: dict[str, str],
          files: dict[str, bytes] | None = None, stdin: bytes = b"") -> Run:
    inputs, out = tmp / f"in-{engine}", tmp / f"out-{engine}"
    _place(inputs, files or {})
    out.mkdir(parents=True, exist_ok=True)
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=argv, env=[f"{k}={v}" for k, v in env.items()], dirs=[(inputs, "/")], stdin=stdin,
                        stdout=stdout, stderr=stderr, out_dir=out)
    t0 = time.perf_counter()
    g = open_guest(wasm, engine)
    try:
        t1 = time.perf_counter()
        code = WasiHost(g, config).run()
        t2 = time.perf_counter()
    finally:
        g.close()
    return Run(stdout.getvalue(), stderr.getvalue(), code, _tree(out), t2 - t1, t1 - t0)


def same_bytes(what: str, native_out: bytes, guest_out: bytes) -> None:
    """Equal, or an AssertionError with a readable diff of the first differences."""
    if native_out == guest_out:
        return
    diff = difflib.unified_diff(native_out.decode(errors="replace").splitlines(),
                                guest_out.decode(errors="replace").splitlines(), "native", "guest", lineterm="", n=1)
    raise AssertionError(f"{what} differs:\n" + "\n".join(list(diff)[:60]))


def same(native_run: Run, guest_run: Run, *, files: bool = True) -> None:
    """The guest printed, exited and wrote exactly what the native build did."""
    same_bytes("stdout", native_run.stdout, guest_run.stdout)
    same_bytes("stderr", native_run.stderr, guest_run.stderr)
    assert guest_run.code == native_run.code, f"exit status: native {native_run.code}, guest {guest_run.code}"
    if files:
        assert sorted(guest_run.files) == sorted(native_run.files)
        for rel, data in native_run.files.items():
            assert guest_run.files[rel] == data, f"file {rel} differs"
