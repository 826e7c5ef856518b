"""Run a C/C++ test program three ways: natively (gcc), and as wasm with capsule's guest runtime under each
engine (wasmtime now; the kernel once the compiler lowers the capsule intrinsics), and compare.

``ENGINES`` is the switch: set ``KERNEL = True`` (or CAPSULE_WASI_KERNEL=1) to run every program in the kernel
too. Everything a program sees is the same in every run: argv (argv[0] is "prog"), the exact environment,
the files of its working directory (natively a temporary directory, in the guest the root "/"), stdin.
"""

from __future__ import annotations

import difflib
import io
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.testing.engines import open_guest
from capsule.toolchain.guest import build_wasm
from capsule.toolchain.native import build_native

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
NATIVE_CACHE = Path(__file__).resolve().parent.parent.parent / ".cache" / "tests" / "native"

KERNEL = os.environ.get("CAPSULE_WASI_KERNEL", "1") == "1"  # CAPSULE_WASI_KERNEL=0: wasmtime only
ENGINES = ["wasmtime", *(["kernel"] if KERNEL else [])]
FLOAT_ENGINES_PENDING: set[str] = set()  # engines where double arithmetic waits for soft-float (none now)


def engine_params(floats: bool = False) -> list:
    """pytest params for the engines; programs doing double arithmetic are xfail where soft-float is missing,
    and the kernel engine requires BPF."""
    out = []
    for e in ENGINES:
        marks = [pytest.mark.xfail(reason="soft-float", strict=False)] if floats and e in FLOAT_ENGINES_PENDING else []
        if e == "kernel":
            marks.append(pytest.mark.requires_bpf)
        out.append(pytest.param(e, id=e, marks=marks))
    return out


@dataclass
class Outcome:
    stdout: bytes
    stderr: bytes
    code: int
    files: dict[str, bytes] = field(default_factory=dict)  # files the run created or changed, by relative path


def program(name: str) -> Path:
    return PROGRAMS / name


def native(src: Path, args: list[str], *, env: dict[str, str], files: dict[str, bytes] | None = None,
           stdin: bytes = b"", flags: list[str] | None = None, tmp: Path) -> Outcome:
    NATIVE_CACHE.mkdir(parents=True, exist_ok=True)
    import hashlib

    key = hashlib.sha256(src.read_bytes() + repr(flags).encode()).hexdigest()[:16]
    exe = NATIVE_CACHE / f"{src.stem}-{key}"
    if not exe.exists():
        part = exe.with_name(exe.name + f".{os.getpid()}")
        build_native([src], part, ["-O2", *(flags or [])])
        os.replace(part, exe)
    cwd = tmp / "native"
    cwd.mkdir()
    before = _place(cwd, files or {})
    res = subprocess.run(["prog", *args], executable=str(exe), cwd=cwd, env=env, input=stdin,
                         capture_output=True, timeout=120, check=False)
    return Outcome(res.stdout, res.stderr, res.returncode & 0xFF, _changed(cwd, before))


def guest(src: Path | list[Path], args: list[str], *, engine: str, env: dict[str, str],
          files: dict[str, bytes] | None = None, stdin: bytes | None = b"", flags: list[str] | None = None,
          tmp: Path) -> Outcome:
    srcs = src if isinstance(src, list) else [src]
    wasm = build_wasm(srcs, ["-O2", *(flags or [])]).wasm
    root = tmp / f"guest-{engine}"
    root.mkdir()
    _place(root, files or {})
    out_dir = tmp / f"out-{engine}"
    out_dir.mkdir()
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=["prog", *args], env=[f"{k}={v}" for k, v in env.items()], dirs=[(root, "/")],
                        stdin=stdin, stdout=stdout, stderr=stderr, out_dir=out_dir)
    g = open_guest(wasm, engine)
    try:
        code = WasiHost(g, config).run()
    finally:
        g.close()
    changed = {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    return Outcome(stdout.getvalue(), stderr.getvalue(), code, changed)


def _place(root: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return dict(files)


def _changed(root: Path, before: dict[str, bytes]) -> dict[str, bytes]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            rel = p.relative_to(root).as_posix()
            data = p.read_bytes()
            if before.get(rel) != data:
                out[rel] = data
    return out


def compare(name: str, args: list[str] | None = None, *, engine: str, tmp: Path, env: dict[str, str] | None = None,
            files: dict[str, bytes] | None = None, stdin: bytes = b"", flags: list[str] | None = None) -> Outcome:
    """Run program ``name`` natively and in the guest; assert identical stdout, stderr, status and files."""
    src = program(name)
    env = env if env is not None else {"LANG": "C"}
    a = native(src, args or [], env=env, files=files, stdin=stdin, flags=flags, tmp=tmp)
    b = guest(src, args or [], engine=engine, env=env, files=files, stdin=stdin, flags=flags, tmp=tmp)
    _same("stdout", a.stdout, b.stdout)
    _same("stderr", a.stderr, b.stderr)
    assert b.code == a.code, f"exit status: native {a.code}, {engine} {b.code}"
    assert sorted(b.files) == sorted(a.files), f"files: native {sorted(a.files)}, {engine} {sorted(b.files)}"
    for name in a.files:
        _same(f"file {name}", a.files[name], b.files[name])
    return b


def _same(what: str, native_out: bytes, guest_out: bytes) -> None:
    """Fail with a readable diff (this module is not rewritten by pytest, so say it ourselves)."""
    if native_out == guest_out:
        return
    diff = difflib.unified_diff(native_out.decode(errors="replace").splitlines(),
                                guest_out.decode(errors="replace").splitlines(), "native", "guest", lineterm="", n=1)
    raise AssertionError(f"{what} differs:\n" + "\n".join(list(diff)[:60]))
