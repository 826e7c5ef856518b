"""Random C programs (csmith) run natively, under wasmtime and in the kernel: their checksums must be equal.

A seed becomes a program in three steps, each cached by seed in ``.cache/tests/csmith`` (``CAPSULE_TEST_CACHE``):

1. ``csmith --seed S`` with ``CSMITH_FLAGS`` (small programs: a few functions, shallow blocks) writes the C;
2. gcc builds it and runs it under a CPU-time limit: a program that does not end within ``CPU_LIMIT_S``, or
   runs longer than ``KEEP_CPU_MS`` natively, is dropped (csmith programs are free of undefined behaviour, but
   not of long or endless loops); the rest are kept with their checksum;
3. kept programs go to the kernel in *batches*: one wasm32-wasi module (capsule's toolchain) holds up to
   ``BATCH`` programs, each one's ``main`` renamed, and a driver that prints each seed before running it. One
   build, one compilation to BPF and one load serve the whole batch, so hundreds of programs take minutes.

The kernel's output must equal wasmtime's and the native checksums, seed by seed. When a batch fails, each of
its programs is run alone to name the seeds at fault; a failure's message is the command that reproduces it:

    .venv/bin/python -m tests.compiler.csmith_harness --seed S [--unchecked] [--no-may-goto]

``--many N`` runs N kept programs from ``--start`` on, in batches over ``--jobs`` processes (thousands, outside
the regular suite).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from capsule.compiler import Options, compile_module
from capsule.runtime.instance import Instance
from capsule.runtime.wasi_host import KernelGuest, WasiConfig, WasiHost
from capsule.testing.engines import WasmtimeGuest
from capsule.toolchain.guest import build_wasm, runtime_objects
from capsule.wasm import load

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CAPSULE_TEST_CACHE", ROOT / ".cache" / "tests")) / "csmith"
CSMITH_INCLUDE = Path("/usr/include/csmith")  # Debian's libcsmith-dev (scripts/setup.sh installs it)
#: small programs: few functions, shallow nesting, short arrays; every statement and expression kind stays on
CSMITH_FLAGS = ("--no-argc", "--concise", "--max-funcs", "4", "--max-block-depth", "3", "--max-expr-complexity",
                "6", "--max-array-dim", "2", "--max-array-len-per-dim", "6")
NATIVE_FLAGS = ("-m32", "-O1", "-w")  # ILP32, as wasm32: csmith's arithmetic on long depends on it
WASM_FLAGS = ("-O2", "-w")
#: a program still running after this much CPU time natively is taken not to terminate: the lowest RLIMIT_CPU,
#: since about one seed in eight never ends and each costs this much (the kept ones take under 60 ms)
CPU_LIMIT_S = 1
KEEP_CPU_MS = 60.0  # programs slower than this natively would make the kernel runs minutes long
BATCH = 20  # programs per module: the fixed cost (the WASI runtime, ~36k BPF instructions) is paid once
KERNEL_DEADLINE_S = 300.0  # wall time for one batch in the kernel (a miscompiled loop may never end)
CHECKSUM = re.compile(r"^checksum = ([0-9A-F]+)$")
SEED_LINE = "csmith seed "
RECORD_VERSION = 1


class CsmithError(Exception):
    """csmith or a compiler could not produce a program (the machine's set-up, not capsule, is at fault)."""


# -- the profiles a batch is compiled with --------------------------------------------------------------------
@dataclass(frozen=True)
class Profile:
    """Build options of a batch, and the command-line flags that ask for them."""

    name: str
    checked: bool = True
    may_goto: bool = True

    def options(self) -> Options:
        return Options(checked=self.checked, may_goto=self.may_goto)

    def flags(self) -> list[str]:
        return (["--unchecked"] if not self.checked else []) + (["--no-may-goto"] if not self.may_goto else [])


DEFAULT = Profile("default")
UNCHECKED = Profile("unchecked", checked=False)
NO_MAY_GOTO = Profile("no-may-goto", may_goto=False)
BOTH = Profile("unchecked-no-may-goto", checked=False, may_goto=False)
#: batch k is compiled with ROTATION[k % len]: half the batches default, the rest the other profiles
ROTATION = (DEFAULT, UNCHECKED, DEFAULT, NO_MAY_GOTO, DEFAULT, BOTH)


def profile_for(batch: int) -> Profile:
    return ROTATION[batch % len(ROTATION)]


# -- seeds: generate, build natively, run -----------------------------------------------------------------------
@dataclass
class Seed:
    """What the native run of one seed's program said."""

    seed: int
    status: str  # "ok", "timeout" (no end within CPU_LIMIT_S), "failed" (crash, odd output)
    checksum: str = ""
    cpu_ms: float = 0.0

    @property
    def kept(self) -> bool:
        return self.status == "ok" and self.cpu_ms <= KEEP_CPU_MS


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise CsmithError(f"{name} is not installed (scripts/setup.sh installs csmith and libcsmith-dev)")
    return path


def _csmith_key() -> str:
    """Names the generator and its flags, so a new csmith or other flags get their own cache entries."""
    with tempfile.TemporaryDirectory(prefix="capsule-csmith-") as tmp:  # csmith writes platform.info in its cwd
        version = subprocess.run([_tool("csmith"), "--version"], capture_output=True, text=True, check=False,
                                 cwd=tmp).stdout
    return hashlib.sha256(repr((version, CSMITH_FLAGS, NATIVE_FLAGS, RECORD_VERSION)).encode()).hexdigest()[:12]


def source_path(seed: int, key: str) -> Path:
    return CACHE / key / f"s{seed}.c"


def generate(seed: int, key: str) -> Path:
    """The program of ``seed`` (csmith's output, cached)."""
    out = source_path(seed, key)
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="capsule-csmith-") as tmp:  # its platform.info goes there
            res = subprocess.run([_tool("csmith"), "--seed", str(seed), *CSMITH_FLAGS], capture_output=True,
                                 text=True, check=False, cwd=tmp)
        if res.returncode or "int main" not in res.stdout:
            raise CsmithError(f"csmith --seed {seed} failed: {res.stderr.strip()[:300]}")
        part = out.with_suffix(f".{os.getpid()}.part")
        part.write_text(res.stdout)
        os.replace(part, out)
    return out


def _run_limited(exe: Path) -> tuple[int, str, float]:
    """Run ``exe`` under RLIMIT_CPU (the kernel ends it with SIGXCPU/SIGKILL): exit status (negative: the
    signal), stdout, and the CPU time it used in ms (its own, so a loaded machine does not decide)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["sh", "-c", f"ulimit -t {CPU_LIMIT_S}; exec \"$0\"", str(exe)], stdout=out,
                                stderr=subprocess.DEVNULL)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.returncode = 0  # reaped by wait4 above
        out.seek(0)
        text = out.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    return code, text, (usage.ru_utime + usage.ru_stime) * 1e3


def run_native(seed: int, key: str) -> Seed:
    """Build the seed's program with gcc and run it (the record is cached)."""
    record = CACHE / key / f"s{seed}.json"
    try:
        return Seed(**json.loads(record.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    src = generate(seed, key)
    with tempfile.TemporaryDirectory(prefix="capsule-csmith-") as tmp:
        exe = Path(tmp) / "p"
        res = subprocess.run([_tool("gcc"), *NATIVE_FLAGS, f"-I{CSMITH_INCLUDE}", str(src), "-o", str(exe)],
                             capture_output=True, text=True, check=False)
        if res.returncode:
            raise CsmithError(f"gcc cannot build seed {seed}: {res.stderr.strip()[:300]}")
        code, text, cpu_ms = _run_limited(exe)
    m = CHECKSUM.match(text.strip())
    if code in (-signal.SIGXCPU, -signal.SIGKILL):
        seed_rec = Seed(seed, "timeout", cpu_ms=cpu_ms)
    elif code != 0 or m is None or text.count("\n") != 1:
        seed_rec = Seed(seed, "failed", cpu_ms=cpu_ms)
    else:
        seed_rec = Seed(seed, "ok", m.group(1), cpu_ms)
    part = record.with_suffix(f".{os.getpid()}.part")
    part.write_text(json.dumps(seed_rec.__dict__))
    os.replace(part, record)
    return seed_rec


def kept_seeds(count: int, start: int = 1, jobs: int = 4, progress: Callable[[str], None] | None = None
               ) -> list[Seed]:
    """The first ``count`` seeds from ``start`` on whose programs end quickly natively, in seed order."""
    key = _csmith_key()
    kept: list[Seed] = []
    nxt = start
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # the work is in subprocesses: threads run them in parallel
        while len(kept) < count:
            want = count - len(kept)
            chunk = range(nxt, nxt + want + want // 4 + 8)
            nxt = chunk.stop
            for rec in pool.map(lambda s: run_native(s, key), chunk):
                if rec.kept and len(kept) < count:
                    kept.append(rec)
            if progress:
                progress(f"csmith: {len(kept)} of {count} programs kept (seeds {start}..{nxt - 1})")
    return kept


# -- a batch: one module of several programs --------------------------------------------------------------------
def _wrapper(seed: int, key: str) -> Path:
    """A source that includes the seed's program with its ``main`` renamed, so many fit one module."""
    out = CACHE / key / f"w{seed}.c"
    if not out.is_file():
        part = out.with_suffix(f".{os.getpid()}.part")
        part.write_text(f"#define main csmith_main_{seed}\n#include \"{source_path(seed, key).name}\"\n")
        os.replace(part, out)
    return out


def _driver(seeds: Sequence[int], key: str) -> Path:
    name = hashlib.sha256(repr(list(seeds)).encode()).hexdigest()[:16]
    out = CACHE / key / f"driver-{name}.c"
    if not out.is_file():
        lines = ["#include <stdio.h>"]
        lines += [f"int csmith_main_{s}(void);" for s in seeds]
        lines.append("int main(void) {")
        for s in seeds:
            lines.append(f'    printf("{SEED_LINE}{s}\\n"); csmith_main_{s}();')
        lines += ["    return 0;", "}", ""]
        part = out.with_suffix(f".{os.getpid()}.part")
        part.write_text("\n".join(lines))
        os.replace(part, out)
    return out


def build_batch(seeds: Sequence[int]) -> Path:
    """The wasm32-wasi module of ``seeds`` (build_wasm caches it by content)."""
    key = _csmith_key()
    for s in seeds:
        generate(s, key)
    sources = [_driver(seeds, key), *(_wrapper(s, key) for s in seeds)]
    return build_wasm(sources, [*WASM_FLAGS, f"-I{CSMITH_INCLUDE}"]).wasm


def parse(output: str) -> dict[int, str]:
    """seed -> what its program printed (the checksum line, or whatever it printed instead)."""
    got: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith(SEED_LINE):
            current = got.setdefault(int(line[len(SEED_LINE):]), [])
        elif current is not None:
            m = CHECKSUM.match(line)
            current.append(m.group(1) if m else line)
    return {s: "\n".join(lines) for s, lines in got.items()}


class _Deadline(Exception):
    pass


def run_wasmtime(wasm: Path) -> tuple[int, str]:
    """The reference run: exit status and output under wasmtime."""
    buf = io.BytesIO()
    code = WasiHost(WasmtimeGuest(wasm), WasiConfig(args=["csmith"], stdout=buf, stderr=buf)).run()
    return code, buf.getvalue().decode(errors="replace")


def run_kernel(wasm: Path, options: Options, deadline_s: float = KERNEL_DEADLINE_S) -> tuple[int, str]:
    """Compile, load and run the module; the exit status and output. A run past ``deadline_s`` raises."""
    spec = compile_module(load(wasm.read_bytes()), options)
    buf = io.BytesIO()
    with Instance(spec) as inst:
        host = WasiHost(KernelGuest(inst), WasiConfig(args=["csmith"], stdout=buf, stderr=buf))
        end = time.monotonic() + deadline_s
        serve = host.service

        def service() -> None:  # called whenever the guest hands back control (output, a used-up run)
            if time.monotonic() > end:
                raise _Deadline(f"still running after {deadline_s:.0f} s")
            serve()

        host.service = service  # type: ignore[method-assign]
        code = host.run()
    return code, buf.getvalue().decode(errors="replace")


@dataclass
class Mismatch:
    seed: int
    profile: Profile
    native: str
    wasmtime: str
    kernel: str

    def command(self) -> str:
        return " ".join([".venv/bin/python -m tests.compiler.csmith_harness --seed", str(self.seed),
                         *self.profile.flags()])

    def __str__(self) -> str:
        return (f"seed {self.seed} ({self.profile.name}): native {self.native!r}, wasmtime {self.wasmtime!r}, "
                f"kernel {self.kernel!r}\n  reproduce: {self.command()}")


@dataclass
class BatchResult:
    seeds: list[int]
    profile: Profile
    mismatches: list[Mismatch] = field(default_factory=list)
    seconds: float = 0.0


def _kernel_outcome(wasm: Path, options: Options) -> tuple[int, str]:
    try:
        return run_kernel(wasm, options)
    except Exception as e:  # a compile error, a rejected load, a trap, the deadline: all are the kernel's answer
        return -1, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def check_batch(records: Sequence[Seed], profile: Profile, *, isolate: bool = True) -> BatchResult:
    """Run one batch in both engines; on any difference, run each program alone to name the seeds at fault."""
    t0 = time.perf_counter()
    seeds = [r.seed for r in records]
    wasm = build_batch(seeds)
    _, ref_out = run_wasmtime(wasm)
    code, out = _kernel_outcome(wasm, profile.options())
    ref, got = parse(ref_out), parse(out)
    result = BatchResult(seeds, profile)
    bad = [r for r in records if not (got.get(r.seed) == ref.get(r.seed) == r.checksum) or code != 0]
    if bad and isolate and len(records) > 1:
        for r in bad:
            result.mismatches += check_batch([r], profile, isolate=False).mismatches
    else:
        tail = "" if code == 0 else f" (exit status {code}: {out.strip().splitlines()[-1] if out.strip() else ''})"
        result.mismatches += [Mismatch(r.seed, profile, r.checksum, ref.get(r.seed, "<nothing>"),
                                       got.get(r.seed, "<nothing>") + tail) for r in bad]
    result.seconds = time.perf_counter() - t0
    return result


def batches(records: Sequence[Seed], size: int = BATCH) -> list[list[Seed]]:
    return [list(records[i : i + size]) for i in range(0, len(records), size)]


def prebuild(groups: Iterable[Sequence[Seed]], jobs: int = 2) -> None:
    """Build every batch's module ahead, side by side (clang runs in subprocesses)."""
    runtime_objects()  # once, in this thread: it names its temporary files by process id
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda g: build_batch([r.seed for r in g]), groups))


# -- command line ---------------------------------------------------------------------------------------------
def _one(seed: int, profile: Profile) -> int:
    key = _csmith_key()
    rec = run_native(seed, key)
    print(f"seed {seed}: native {rec.status} {rec.checksum} ({rec.cpu_ms:.1f} ms CPU), source "
          f"{source_path(seed, key)}")
    if rec.status != "ok":
        return 0
    res = check_batch([rec], profile, isolate=False)
    for m in res.mismatches:
        print(m)
    print("ok" if not res.mismatches else "MISMATCH")
    return 1 if res.mismatches else 0


def _batch_job(args: tuple[list[Seed], int]) -> BatchResult:
    group, index = args
    return check_batch(group, profile_for(index))


def _many(count: int, start: int, jobs: int) -> int:
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    records = kept_seeds(count, start, jobs=2 * jobs, progress=say)
    groups = batches(records)
    prebuild(groups, jobs)
    failures: list[Mismatch] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for k, res in enumerate(pool.map(_batch_job, [(g, i) for i, g in enumerate(groups)])):
            failures += res.mismatches
            say(f"batch {k + 1}/{len(groups)} ({res.profile.name}, seeds {res.seeds[0]}..{res.seeds[-1]}): "
                f"{len(res.mismatches)} mismatches, {res.seconds:.1f} s")
    for m in failures:
        print(m)
    print(f"{len(records)} programs, {len(failures)} mismatches")
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.compiler.csmith_harness", description=__doc__.split("\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--seed", type=int, help="run one seed's program in all three engines")
    what.add_argument("--many", type=int, metavar="N", help="run N kept programs in batches")
    p.add_argument("--start", type=int, default=1, help="first seed of --many (default 1)")
    p.add_argument("--jobs", type=int, default=2, help="processes for --many (default 2)")
    p.add_argument("--unchecked", action="store_true", help="Options(checked=False) for --seed")
    p.add_argument("--no-may-goto", action="store_true", help="Options(may_goto=False) for --seed")
    args = p.parse_args(argv)
    try:
        if args.seed is not None:
            prof = Profile("command line", checked=not args.unchecked, may_goto=not args.no_may_goto)
            return _one(args.seed, prof)
        return _many(args.many, args.start, args.jobs)
    except CsmithError as e:
        print(f"csmith_harness: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
