"""The jobs of test_load.py, each run as a capsule process of its own (``python -m tests.reliability.load_jobs
JOB [ARGS]``): it does its work in the kernel, compares the result with the native build's, and prints one
line, ``ok JOB: ...``, or exits non-zero with what differed.

    c PASSES      long_run.c in the kernel (capsule run), its result.bin compared with the native build's
    lua           Lua 5.4.8 running tests/thirdparty/lua/features.lua, stdout/stderr/status as natively
    doom FRAMES   DOOM's scripted demo, every frame's SHA-256 as natively
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tempfile
from pathlib import Path

from capsule.toolchain.native import build_native_cached

HERE = Path(__file__).resolve().parent
LONG_RUN = HERE / "long_run.c"
LUA_SCRIPTS = HERE.parent / "thirdparty" / "lua"
LUA_ARGS = ["-l", "bench", "features.lua"]


def _capsule(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, cwd=cwd, check=False)


def job_c(passes: str) -> str:
    exe = build_native_cached([LONG_RUN], ["-O2"], name="long_run")
    with tempfile.TemporaryDirectory(prefix="capsule-load-") as tmp:
        d = Path(tmp)
        (d / "native").mkdir()
        subprocess.run([str(exe), "4", passes], cwd=d / "native", check=True, capture_output=True)
        want = (d / "native" / "result.bin").read_bytes()
        res = _capsule("run", "--out", "out", str(LONG_RUN), "4", passes, cwd=d)
        if res.returncode:
            raise SystemExit(f"c: status {res.returncode}: {res.stderr.decode()[-1500:]}")
        got = (d / "out" / "result.bin").read_bytes()
    if got != want:
        raise SystemExit(f"c: result.bin differs ({len(got)} bytes, native {len(want)})")
    return f"c: {len(got)} bytes as natively"


def job_lua() -> str:
    from capsule.runtime.wasi_host import WasiConfig, WasiHost
    from capsule.sources import lua as recipe
    from capsule.testing.engines import open_guest

    tree = recipe.fetch()
    wasm = recipe.build_wasm(tree)
    native = subprocess.run(["lua", *LUA_ARGS], executable=str(recipe.build_native(tree, HERE.parent.parent /
                                                                                   ".cache" / "tests" / "native")),
                            cwd=LUA_SCRIPTS, env={"LANG": "C"}, capture_output=True, check=False)
    out, err = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=["lua", *LUA_ARGS], env=["LANG=C"], dirs=[(LUA_SCRIPTS, "/")], stdin=b"", stdout=out,
                        stderr=err)
    guest = open_guest(wasm, "kernel")
    try:
        code = WasiHost(guest, config).run()
    finally:
        guest.close()
    if (out.getvalue(), err.getvalue(), code) != (native.stdout, native.stderr, native.returncode):
        raise SystemExit(f"lua: differs from native (status {code}, native {native.returncode})\n"
                         f"{err.getvalue().decode()[-1500:]}")
    return f"lua: {len(native.stdout)} bytes of output as natively"


def job_doom(frames: str) -> str:
    from capsule.demo import doom as demo
    from capsule.sources import doom
    from tests.thirdparty.runs import native

    tree, wad = doom.fetch(), doom.wad()
    exe, wasm = doom.build_native(tree), doom.build_wasm(tree)
    n = int(frames)
    size = 320 * 200 * 4
    with tempfile.TemporaryDirectory(prefix="capsule-load-") as tmp:
        cwd = Path(tmp) / "native"
        files = {demo.WAD_GUEST: wad.read_bytes(), demo.INPUT_GUEST: demo.DEMO_INPUT.encode()}
        argv = ["doom", "-iwad", demo.WAD_GUEST, "-capsule-input", demo.INPUT_GUEST, "-capsule-frames", frames,
                "-capsule-dump", "frames.bin"]
        dump = native(exe, argv, cwd=cwd, env={"HOME": str(cwd)}, files=files).files["frames.bin"]
    want = [hashlib.sha256(dump[i * size:(i + 1) * size]).hexdigest() for i in range(n)]
    run = demo.play(wasm, wad, engine="kernel", frames=n, stdout=io.BytesIO(), stderr=io.BytesIO())
    if run.status != 0 or run.frame_hashes != want:
        same = sum(a == b for a, b in zip(run.frame_hashes, want, strict=False))
        raise SystemExit(f"doom: status {run.status}, {same} of {n} frames as natively")
    return f"doom: {n} frames as natively"


JOBS = {"c": job_c, "lua": job_lua, "doom": job_doom}


def main(argv: list[str]) -> int:
    print(f"ok {JOBS[argv[0]](*argv[1:])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
