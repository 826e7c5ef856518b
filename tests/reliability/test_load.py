"""Load (issue 15.4): several capsule processes at once on one kernel, a fiber pool under continuous
resume/reset, and a soak whose host memory and kernel objects must not grow.

- Several processes at once: an attach with traffic, a build, and jobs in the kernel (``load_jobs.py``), each
  compared with its native build; afterwards no program, map, link, process or namespace of theirs is left.
  The regular suite runs two C programs, a build and an attach; ``CAPSULE_SLOW=1`` runs the issue's mix: four
  Lua runs, two DOOM runs, a build and an attach.
- The fiber pool: every fiber of a module starts, continues (small budgets, so calls stay PENDING), finishes or
  is reset, in a random order from a seed, and the model's generation of every fiber and every result are
  checked exactly at each step; a token from before a reset is refused.
- The soak: one program loaded, run and closed over and over in this process; the resident set and the
  process's descriptors must stop growing after a warm-up, and no kernel object may remain.

``CAPSULE_SOAK_SECONDS`` sets how long the fiber pool and the soak run (default: 5 and 8 s, or 120 s each with
``CAPSULE_SLOW=1``); each prints its figures (``-s`` shows them).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capsule.compiler import abi
from capsule.hooks import packets as P
from capsule.hooks.netns import VethPair, namespaces
from capsule.runtime import CallError, Pending
from tests import leaks
from tests.compiler.diff_harness import Pair

pytestmark = pytest.mark.requires_bpf

SLOW = os.environ.get("CAPSULE_SLOW") == "1"
SOAK_S = float(os.environ.get("CAPSULE_SOAK_SECONDS", "120" if SLOW else "0") or 0)
HERE = Path(__file__).resolve().parent
HANDLER = HERE / "attach_flood.c"
HELLO = HERE / "faults_hello.c"
MIX = ["lua"] * 4 + ["doom 30"] * 2 if SLOW else ["c 1", "c 1"]
ETH_TEST = 0x88B5


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def _orphans(baseline: leaks.KernelBaseline) -> list[str]:
    return leaks.settle(lambda: leaks.leaked_objects(baseline, leaks.token(), set()), seconds=30)


def test_several_capsule_processes_at_once(tmp_path: Path) -> None:
    baseline = leaks.KernelBaseline.take()
    with VethPair(tag=f"{leaks.token()}-load") as v:
        attach = subprocess.Popen(_python("-m", "capsule.cli", "attach", "xdp", str(HANDLER), "--dev", v.dev_a,
                                          "--netns", v.ns_a, "--interval", "0"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert attach.stderr is not None
        line = attach.stderr.readline()
        assert "attached to" in line, line + attach.stderr.read()[-2000:]
        t0 = time.monotonic()
        jobs = [subprocess.Popen(_python("-m", "tests.reliability.load_jobs", *job.split()), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, cwd=HERE.parent.parent) for job in MIX]
        build = subprocess.Popen(_python("-m", "capsule.cli", "build", str(HERE / "long_run.c"), "-O1", "-o",
                                         str(tmp_path / "built.bpf.o")),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sent = 0
        while any(p.poll() is None for p in [*jobs, build]):
            sent += v.send([P.ether(v.mac_a, v.mac_b, ETH_TEST, b"x" + bytes(50))])
            time.sleep(0.2)
        seconds = time.monotonic() - t0
        attach.send_signal(signal.SIGINT)
        _, attach_err = attach.communicate(timeout=120)
        results = [p.communicate(timeout=60) for p in jobs]
        build_out, build_err = build.communicate(timeout=60)
    for job, p, (out, err) in zip(MIX, jobs, results, strict=True):
        assert p.returncode == 0 and out.startswith("ok "), f"{job}: status {p.returncode}\n{err[-3000:]}"
        print(out.strip())
    assert build.returncode == 0 and (tmp_path / "built.bpf.o").read_bytes()[:4] == b"\x7fELF", build_err
    assert attach.returncode == 0 and "capsule: detached;" in attach_err, attach_err[-2000:]
    counted = int(attach_err.split("capsule: detached;")[1].split(" packets")[0].split(": ")[-1])
    assert counted >= sent > 0, attach_err[-500:]
    print(f"{len(MIX)} jobs, a build and an attach ({sent} packets) at once: {seconds:.1f} s")
    assert not _orphans(baseline)
    assert not {v.ns_a, v.ns_b} & namespaces()
    assert not [d for d in map(leaks.describe_pid, leaks.session_pids(leaks.token()))
                if "load_jobs" in d or "capsule.cli" in d]


def _generation(inst: object, fiber: int) -> int:
    return inst.u64(abi.FIBERS + fiber * abi.FIBER_SIZE + abi.FIBER_GENERATION)  # type: ignore[attr-defined]


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def test_a_fiber_pool_under_resume_and_reset() -> None:
    """Every fiber busy at once, each step chosen from a seed: start fib(n) with a small budget, continue it,
    or reset the fiber; each finished call must give fib(n) exactly, each reset must add one to the fiber's
    generation (and nothing else must), and a token from before a reset must be refused."""
    seconds = SOAK_S or 5.0
    rng = random.Random(154)
    with Pair("recursion") as pair:
        inst = pair.kernel.instance
        fibers = inst.fibers
        gens = [_generation(inst, f) for f in range(fibers)]
        pending: dict[int, tuple[Pending, int]] = {}
        stale: list[Pending] = []
        done = resets = steps = refused = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            f = rng.randrange(fibers)
            steps += 1
            if f not in pending:
                n = rng.randrange(12, 24)
                res = inst.start(inst.export_index("fib"), [n], fiber=f, budget=rng.choice([50, 200, 1000]))
            elif rng.random() < 0.1:
                stale.append(pending.pop(f)[0])
                inst.reset(f)
                gens[f] = (gens[f] + 1) & 0xFFFFFFFF or 1
                resets += 1
                res = None
            else:
                token, n = pending.pop(f)
                res = inst.resume(token.token, budget=rng.choice([50, 200, 1000]))
            if isinstance(res, Pending):
                assert res.token >> 32 == f and res.token & 0xFFFFFFFF == gens[f]
                pending[f] = (res, n)
            elif res is not None:
                assert res == [_fib(n)], (f, n, res)
                done += 1
            assert [_generation(inst, k) for k in range(fibers)] == gens
            if stale and rng.random() < 0.05:
                with pytest.raises(CallError, match="stale or invalid"):
                    inst.resume(stale.pop().token)
                refused += 1
    print(f"fiber pool: {fibers} fibers, {steps} steps in {seconds:.0f} s: {done} calls finished exactly, "
          f"{resets} resets, {refused} stale tokens refused")
    assert done > 0 and resets > 0 and refused > 0


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_soak_keeps_memory_and_kernel_objects_flat() -> None:
    """Load, run and close one program over and over: after the first fifth of the run (the warm-up: caches,
    the allocator's arenas), the resident set may grow by at most 8 MiB, the descriptors not at all, and no
    kernel object may be left."""
    import io

    from capsule.runtime.wasi_host import WasiConfig, WasiHost
    from capsule.testing.engines import open_guest
    from capsule.toolchain.guest import build_wasm

    seconds = SOAK_S or 8.0
    wasm = build_wasm([HELLO]).wasm
    baseline = leaks.KernelBaseline.take()
    samples: list[tuple[float, int, int]] = []
    t0 = time.monotonic()
    runs = 0
    while time.monotonic() - t0 < seconds or runs < 5:
        out = io.BytesIO()
        guest = open_guest(wasm, "kernel")
        try:
            code = WasiHost(guest, WasiConfig(args=["hello"], stdout=out, stderr=io.BytesIO())).run()
        finally:
            guest.close()
        assert code == 0 and out.getvalue() == b"line 1\nline 2\nline 3\n"
        runs += 1
        samples.append((time.monotonic() - t0, _rss_kib(), len(os.listdir("/proc/self/fd"))))
    warm = samples[len(samples) // 5]
    last = samples[-1]
    peak = max(s[1] for s in samples[len(samples) // 5:])
    print(f"soak: {runs} loads and runs in {last[0]:.0f} s; RSS {samples[0][1] // 1024} MiB at the first, "
          f"{warm[1] // 1024} MiB after the warm-up, {last[1] // 1024} MiB at the end (peak {peak // 1024} MiB); "
          f"descriptors {warm[2]} -> {last[2]}")
    assert last[2] <= warm[2], "descriptors grew"
    assert peak - warm[1] <= 8 << 10, f"RSS grew by {(peak - warm[1]) >> 10} MiB after the warm-up"
    assert not _orphans(baseline)
