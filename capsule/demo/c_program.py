"""The README's main job for C: build a bundled C program twice, natively with gcc and with capsule, run both,
and show their outputs side by side with the time ratio.

The capsule side runs in the kernel (``engine="kernel"``) or, as the reference, under wasmtime. The demo
fails (exit status 1) if the two outputs or exit statuses differ.
"""

from __future__ import annotations

import io
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.testing.engines import open_guest
from capsule.toolchain.guest import build_wasm
from capsule.toolchain.native import build_native

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "wordcount_primes.c"


@dataclass
class Run:
    output: bytes
    code: int
    seconds: float  # the run itself (for capsule: _start to exit, without building, loading or verifying)
    prepare_seconds: float  # building (and for the kernel: compiling to BPF, loading, verifying)


def run_native(source: Path, workdir: Path) -> Run:
    t0 = time.perf_counter()
    exe = build_native([source], workdir / "native", ["-O2"])
    t1 = time.perf_counter()
    res = subprocess.run([str(exe)], cwd=workdir, capture_output=True, check=False)
    t2 = time.perf_counter()
    return Run(res.stdout + res.stderr, res.returncode, t2 - t1, t1 - t0)


def run_capsule(source: Path, workdir: Path, engine: str) -> Run:
    t0 = time.perf_counter()
    wasm = build_wasm([source], ["-O2"]).wasm
    guest = open_guest(wasm, engine)
    try:
        out = io.BytesIO()
        host = WasiHost(guest, WasiConfig(args=[source.stem], stdout=out, stderr=out, out_dir=workdir / "out"))
        t1 = time.perf_counter()
        code = host.run()
        t2 = time.perf_counter()
    finally:
        guest.close()
    return Run(out.getvalue(), code, t2 - t1, t1 - t0)


def run_c_demo(console: Console, source: Path = EXAMPLE, engine: str = "kernel") -> int:
    where = "in the kernel" if engine == "kernel" else f"under {engine}"
    console.print(f"[bold]{source.name}[/bold]: built natively with gcc -O2, and with capsule, run {where}")
    with tempfile.TemporaryDirectory(prefix="capsule-demo-") as tmp:
        work = Path(tmp)
        native = run_native(source, work)
        mine = run_capsule(source, work, engine)
    table = Table(show_lines=False)
    table.add_column("native (gcc -O2)", overflow="fold")
    table.add_column(f"capsule ({engine})", overflow="fold")
    a = native.output.decode(errors="replace").splitlines()
    b = mine.output.decode(errors="replace").splitlines()
    for i in range(max(len(a), len(b))):
        left, right = (a[i] if i < len(a) else ""), (b[i] if i < len(b) else "")
        table.add_row(left, right if left == right else f"[red]{right}[/red]")
    table.add_row(f"exit status {native.code}", f"exit status {mine.code}")
    console.print(table)
    ratio = mine.seconds / native.seconds if native.seconds else float("inf")
    console.print(f"run time: native {native.seconds * 1000:.1f} ms, capsule {mine.seconds * 1000:.1f} ms "
                  f"(x{ratio:.1f}); capsule's build and load took {mine.prepare_seconds:.2f} s", highlight=False)
    if native.output != mine.output or native.code != mine.code:
        console.print("[red]the outputs differ[/red]")
        return 1
    console.print("[green]identical output[/green]")
    return 0
