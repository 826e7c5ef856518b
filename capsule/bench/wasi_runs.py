"""One run of a WASI program on each side of the comparison, with the same inputs and its own clock.

* **native**: the gcc build as a child process in a fresh working directory holding the input files; its time
  is the child's CPU time (user + system, from ``wait4``), as the BPF Capsule article measures native runs, so
  a machine shared with other jobs slows it less than wall time would;
* **wasmtime**: the module under the reference engine, timed by this thread's CPU time around ``WasiHost.run``
  (wasmtime runs the guest on the calling thread; the module's compilation happens before, outside the time);
* **kernel**: the module compiled to BPF (by the caller), loaded afresh for every run (a finished program
  cannot be started again on the same instance), timed by the kernel's own accounting: ``run_time_ns`` of
  every program of the object with bpf_stats on, beside the wall time of ``WasiHost.run``.

Each run returns what the program said (stdout, stderr, exit status, the files it wrote) so the caller can
check the sides agree before it counts a time.
"""

from __future__ import annotations

import io
import os
import resource
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from capsule.bpf.spec import ObjectSpec
from capsule.kernel.prog import bpf_stats
from capsule.runtime import Instance
from capsule.runtime.wasi_host import KernelGuest, WasiConfig, WasiHost
from capsule.testing.engines import WasmtimeGuest

from .figures import ObjectFigures, object_figures

NATIVE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Invocation:
    """What a run sees: argv (argv[0] included), environment, files in its working directory, stdin."""

    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    stdin: bytes = b""
    env: tuple[str, ...] = ("LANG=C",)


@dataclass
class Output:
    """What a run said: its streams, exit status, and the files it created or changed (by relative path)."""

    stdout: bytes
    stderr: bytes
    code: int
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass
class KernelRun:
    """One run in the kernel: the output, the kernel's figures and its clocks."""

    output: Output
    figures: ObjectFigures
    bpf_ns: int  # run_time_ns summed over the object's programs
    wall_ns: int
    transitions: int
    invocations: int


def _place(root: Path, files: tuple[tuple[str, bytes], ...]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_native(exe: Path, inv: Invocation) -> tuple[Output, float, float]:
    """Run the native build; (output, CPU seconds, wall seconds)."""
    with tempfile.TemporaryDirectory(prefix="capsule-bench-") as tmp:
        cwd = Path(tmp)
        _place(cwd, inv.files)
        env = dict(e.split("=", 1) for e in inv.env)
        env.setdefault("HOME", tmp)
        with tempfile.TemporaryFile() as inp, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            inp.write(inv.stdin)
            inp.seek(0)
            t0 = time.perf_counter()
            proc = subprocess.Popen(list(inv.argv), executable=str(exe), cwd=cwd, env=env, stdin=inp, stdout=out,
                                    stderr=err)
            status, usage = _wait4(proc)
            wall = time.perf_counter() - t0
            out.seek(0)
            err.seek(0)
            given = dict(inv.files)
            changed = {rel: data for rel, data in _tree(cwd).items() if given.get(rel) != data}
            output = Output(out.read(), err.read(), os.waitstatus_to_exitcode(status) & 0xFF, changed)
    return output, usage.ru_utime + usage.ru_stime, wall


def _wait4(proc: subprocess.Popen[bytes]) -> tuple[int, resource.struct_rusage]:
    """Reap the child with its resource usage (Popen.wait cannot give it); kill it past NATIVE_TIMEOUT_S."""
    timer = threading.Timer(NATIVE_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, usage


def _config(inv: Invocation, inputs: Path, out_dir: Path, stdout: io.BytesIO, stderr: io.BytesIO) -> WasiConfig:
    _place(inputs, inv.files)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = list(inv.env)
    if not any(e.startswith("HOME=") for e in env):
        env.append("HOME=/")  # the working directory, as the native run's HOME is (SQLite's shell looks there)
    return WasiConfig(args=list(inv.argv), env=env, dirs=[(inputs, "/")], stdin=inv.stdin, stdout=stdout,
                      stderr=stderr, out_dir=out_dir)


def run_wasmtime(wasm: bytes, inv: Invocation) -> tuple[Output, float]:
    """Run the module under wasmtime; (output, CPU seconds of the run: wasmtime runs on this thread)."""
    with tempfile.TemporaryDirectory(prefix="capsule-bench-") as tmp:
        stdout, stderr = io.BytesIO(), io.BytesIO()
        config = _config(inv, Path(tmp) / "in", Path(tmp) / "out", stdout, stderr)
        host = WasiHost(WasmtimeGuest(wasm), config)
        t0 = time.thread_time()
        code = host.run()
        cpu = time.thread_time() - t0
        return Output(stdout.getvalue(), stderr.getvalue(), code, _tree(Path(tmp) / "out")), cpu


def run_kernel(spec: ObjectSpec, inv: Invocation) -> KernelRun:
    """Load ``spec`` (a fresh instance), run it once under bpf_stats, and close it."""
    with tempfile.TemporaryDirectory(prefix="capsule-bench-") as tmp:
        stdout, stderr = io.BytesIO(), io.BytesIO()
        config = _config(inv, Path(tmp) / "in", Path(tmp) / "out", stdout, stderr)
        with Instance(spec) as inst:
            figures = object_figures(spec, inst)
            host = WasiHost(KernelGuest(inst), config)
            with bpf_stats():
                bpf0, tr0, inv0 = inst.run_time_ns(), inst.stats.transitions, inst.stats.invocations
                t0 = time.perf_counter_ns()
                code = host.run()
                wall = time.perf_counter_ns() - t0
                bpf = inst.run_time_ns() - bpf0
            output = Output(stdout.getvalue(), stderr.getvalue(), code, _tree(Path(tmp) / "out"))
            return KernelRun(output, figures, bpf, wall, inst.stats.transitions - tr0, inst.stats.invocations - inv0)
