"""Loading and running the loop-benchmark programs, and turning what they leave in ``out`` into a verdict.

``LoopBench`` owns the shared ``out`` map. ``load`` loads one ``LoopProgram`` (its BTF first when it has
subprograms) with the verifier's statistics, or returns a ``Rejected`` carrying the verifier's reason: a
program too large for the verifier is a result of the benchmark, not an error. ``run`` executes a loaded
program with BPF_PROG_TEST_RUN and returns both timings:

- ``duration_ns``: what the kernel reports for the test run, the mean over ``repeat`` runs of the whole
  program (entry, the two ``bpf_ktime_get_ns`` calls, the loop, the stores of the results);
- ``ktime_ns``: what the program measured itself with ``bpf_ktime_get_ns`` around the loop, averaged over the
  same runs.

A dispatcher program whose budget ends before the loop does is continued from the host, one invocation at a
time, as capsule's runtime continues a PENDING computation; the timings are then the sums over invocations.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from dataclasses import dataclass

from capsule.bpf.spec import ProgramSpec
from capsule.kernel import (
    BPFError,
    LogLevel,
    Map,
    MapType,
    Program,
    ProgType,
    VerifierError,
    load_btf,
    parse_stats,
)
from capsule.kernel.collection import resolve_refs
from capsule.kernel.errors import LoadError

from .loop_programs import (
    BPF_MAX_LOOPS,
    OFF_N,
    OUT_MAP,
    OUT_SIZE,
    STATUS_CUT,
    STATUS_DONE,
    STATUS_PENDING,
    LoopProgram,
)

_OUT = struct.Struct("<QQQqQQQQQ")  # the OFF_* fields of ``out`` in order
_PACKET = bytes(64)  # XDP test runs need at least an Ethernet header; the programs never read it
MAX_INVOCATIONS = 4096  # continuing a dispatcher beyond this many invocations is not worth the wait


@dataclass
class Loaded:
    """A verified program and what verifying it cost."""

    lp: LoopProgram
    prog: Program
    processed_insns: int
    verify_us: int | None  # the verifier's own clock (log_level STATS)
    load_ms: float  # wall-clock time of BPF_PROG_LOAD as seen from Python
    xlated_insns: int  # after the verifier's rewrites (inlined helpers, may_goto counters)
    jited_bytes: int

    def close(self) -> None:
        self.prog.close()


@dataclass
class Rejected:
    """The verifier's refusal, as a benchmark result."""

    lp: LoopProgram
    reason: str
    errno: int
    processed_insns: int | None
    load_ms: float

    @property
    def status(self) -> str:
        return f"rejected: {_first_sentence(self.reason)}"


@dataclass
class RunSample:
    """One measured computation: both timings are per computation (all iterations, all invocations)."""

    duration_ns: float
    ktime_ns: float
    sum: int
    status: int
    iterations: int
    invocations: int = 1


@dataclass
class Verdict:
    """Whether a run computed the right sum, or ended at a documented limit; ``text`` says which."""

    ok: bool  # the result is correct (a complete sum, or a partial sum that matches its iteration count)
    complete: bool  # all n iterations ran
    text: str


def _first_sentence(reason: str) -> str:
    return reason.split(". ")[0].rstrip(".") if reason else "refused by the verifier"


class LoopBench:
    """The ``out`` map plus load/run; a context manager so every fd is closed."""

    def __init__(self) -> None:
        self.out = Map.create(MapType.ARRAY, 4, OUT_SIZE, 1, name=OUT_MAP)

    def close(self) -> None:
        self.out.close()

    def __enter__(self) -> LoopBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- loading ---------------------------------------------------------------------------------------
    def load(self, lp: LoopProgram) -> Loaded | Rejected:
        spec = ProgramSpec(f"loop_{lp.mechanism}", "xdp", ProgType.XDP, lp.insns)
        try:
            insns = resolve_refs(spec, {OUT_MAP: self.out})
        except LoadError as e:  # a kfunc this kernel lacks
            return Rejected(lp, str(e), errno.ENOENT, None, 0.0)
        btf_fd = load_btf(lp.btf.encode()) if lp.btf is not None else None
        start = time.perf_counter()
        try:
            prog = Program.load(ProgType.XDP, insns, name=spec.name[:15], log_level=LogLevel.STATS,
                                prog_btf_fd=btf_fd, func_info=lp.func_infos if btf_fd is not None else ())
        except VerifierError as e:
            return Rejected(lp, e.reason or str(e), e.errno or 0, parse_stats(e.log).processed_insns,
                            (time.perf_counter() - start) * 1e3)
        finally:
            if btf_fd is not None:
                btf_fd.close()  # the program holds its own reference
        load_ms = (time.perf_counter() - start) * 1e3
        info = prog.info()
        st = prog.stats
        return Loaded(lp, prog, st.processed_insns if st and st.processed_insns is not None
                      else info.verified_insns, st.verification_time_usec if st else None, load_ms,
                      info.xlated_prog_len // 8, info.jited_prog_len)

    # -- running ---------------------------------------------------------------------------------------
    def _reset(self, n: int) -> None:
        value = bytearray(OUT_SIZE)
        struct.pack_into("<Q", value, OFF_N, n & 0xFFFFFFFFFFFFFFFF)
        self.out.update(0, bytes(value))

    def _read(self) -> tuple[int, ...]:
        raw = self.out.lookup(0)
        assert raw is not None  # element 0 of an ARRAY always exists
        return _OUT.unpack_from(raw)

    def run(self, loaded: Loaded, repeat: int = 1) -> RunSample:
        """Run the program ``repeat`` times (one test run); continue a PENDING dispatcher from the host."""
        lp = loaded.lp
        if lp.budget is not None and lp.n > lp.budget:
            repeat = 1  # each invocation continues the previous one; repeats would not be independent
        self._reset(lp.n)
        res = loaded.prog.test_run(_PACKET, repeat=repeat)
        total, elapsed, runs, status, iters, *_ = self._read()
        if status != STATUS_PENDING:
            return RunSample(float(res.duration_ns), elapsed / max(runs, 1), total, status, iters)
        duration, invocations = float(res.duration_ns), 1
        while status == STATUS_PENDING and invocations < MAX_INVOCATIONS:
            res = loaded.prog.test_run(_PACKET)
            duration += res.duration_ns
            invocations += 1
            total, elapsed, runs, status, iters, *_ = self._read()
        return RunSample(duration, float(elapsed), total, status, iters, invocations)


def verdict(lp: LoopProgram, s: RunSample) -> Verdict:
    """Read a run's status and sum; a wrong sum is reported as such, never passed off as a result."""
    if s.status < 0:
        code = -s.status
        if code == errno.E2BIG:
            return Verdict(s.sum == 0, False, f"E2BIG: over {BPF_MAX_LOOPS} iterations")
        name = errno.errorcode.get(code, str(code))
        return Verdict(False, False, f"error {name} ({os.strerror(code)})")
    expected = lp.expected_sum(s.iterations)
    if s.sum != expected:
        return Verdict(False, False, f"WRONG SUM: {s.sum} after {s.iterations} iterations, expected {expected}")
    if s.status == STATUS_CUT:
        return Verdict(True, False, f"cut by may_goto after {s.iterations} iterations")
    if s.status == STATUS_PENDING:
        return Verdict(True, False, f"pending after {s.invocations} invocations ({s.iterations} iterations)")
    if s.status != STATUS_DONE:
        return Verdict(False, False, f"unknown status {s.status}")
    if s.iterations != lp.n:
        return Verdict(False, False, f"WRONG COUNT: {s.iterations} iterations, expected {lp.n}")
    text = "ok" if s.invocations == 1 else f"ok ({s.invocations} invocations)"
    return Verdict(True, True, text)


def repeat_for(n: int, target_iterations: int = 2_000_000, most: int = 1000) -> int:
    """Test-run repeats so that one measurement covers about ``target_iterations`` loop iterations."""
    return max(1, min(most, target_iterations // max(n, 1)))


def safe_load(bench: LoopBench, lp: LoopProgram) -> Loaded | Rejected:
    """``bench.load`` that also turns a BTF refusal into a ``Rejected`` row instead of an exception."""
    try:
        return bench.load(lp)
    except BPFError as e:
        return Rejected(lp, str(e), e.errno or 0, None, 0.0)
