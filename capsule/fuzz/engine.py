"""Running a target on many mutated inputs, and turning each failure into a file and a command that repeats it.

Input ``i`` of a run with seed ``s`` on target ``t`` is made by ``random.Random(f"{s}:{t}:{i}")`` alone (the seed
input it starts from included), so ``--seed s --start i --count 1`` makes and runs it again. An input fails when
its target raises what no stage documents (a traceback), takes longer than the time limit (a hang), leaves a
file descriptor open (a leak), or has its compiled code refused by the kernel. A failing input is written to the
output folder with a reduced copy (``reduce``): the smallest input found that fails the same way.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from .reduce import reduce
from .targets import KernelRejected, Target

INPUT_SECONDS = 30.0  # one input's CPU-time limit: the slowest stage (a kernel load) takes about a second
WALL_FACTOR = 20


class Hang(BaseException):
    """An input ran past its time limit. Not an ``Exception``: a stage's catch-all (the ELF reader turns
    whatever pyelftools raises into an ``ObjectError``) must not take it for the input's fault."""


@dataclass(frozen=True)
class Problem:
    kind: str  # "traceback", "hang", "leak", "kernel"
    message: str
    where: str  # the innermost capsule frame, file:line (what the reducer keeps constant)

    @property
    def signature(self) -> tuple[str, str, str]:
        return self.kind, self.message.split(":")[0], self.where


@dataclass
class Finding:
    target: str
    index: int
    problem: Problem
    input: Path | None = None
    reduced: Path | None = None
    command: str = ""


@dataclass
class TargetReport:
    target: str
    inputs: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)


def _fds() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{fd}:{os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            continue
    return out


def _where(e: BaseException) -> str:
    """The innermost capsule frame the error passed (for a hang: where the input was when time ran out)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if "/capsule/" in f.filename and not f.filename.endswith("/fuzz/engine.py")]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.rsplit('/capsule/', 1)[-1]}:{f.lineno}"


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """``seconds`` of CPU time (the process's, the kernel's runs of its programs included), so that a loaded
    machine does not make a slow input a hang; and, for an input that waits without working, WALL_FACTOR times
    as many seconds of wall-clock time."""
    def expired(signum: int, frame: FrameType | None) -> None:
        clock = "CPU" if signum == signal.SIGPROF else "wall-clock"
        raise Hang(f"no answer within {seconds if signum == signal.SIGPROF else seconds * WALL_FACTOR:g} s "
                   f"of {clock} time")

    previous = [signal.signal(sig, expired) for sig in (signal.SIGPROF, signal.SIGALRM)]
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in zip((signal.SIGPROF, signal.SIGALRM), previous, strict=True):
            signal.signal(sig, handler)


def attempt(target: Target, data: bytes, seconds: float = INPUT_SECONDS) -> tuple[str, Problem | None]:
    """Run one input: (its outcome, or "failed", and the problem if it failed)."""
    before = _fds()
    problem = None
    outcome = "failed"
    try:
        with _time_limit(seconds):
            outcome = target.run(data)
    except Hang as e:
        problem = Problem("hang", str(e), _where(e))
    except KernelRejected as e:
        problem = Problem("kernel", str(e).splitlines()[0][:300], _where(e))
    except Exception as e:
        problem = Problem("traceback", f"{type(e).__name__}: {str(e)[:300]}", _where(e))
    after = _fds()
    if after - before:
        gc.collect()  # a descriptor dropped without close() is closed by its collector: still a leak
        leaked = sorted(after - before)
        if problem is None:
            problem = Problem("leak", f"descriptors left open: {', '.join(leaked)}", "")
    return outcome, problem


def input_for(target: Target, seeds: list[bytes], seed: int, index: int) -> bytes:
    rng = random.Random(f"{seed}:{target.name}:{index}")
    return target.mutate(rng.choice(seeds), rng)


def run_target(target: Target, *, seed: int, start: int = 0, count: int | None = None,
               seconds: float | None = None, out_dir: Path | None = None, command: str = "",
               progress: Callable[[TargetReport], None] | None = None) -> TargetReport:
    """Fuzz ``target`` from input ``start`` on, ``count`` inputs or for ``seconds`` (whichever ends first)."""
    seeds = target.seeds()
    report = TargetReport(target.name)
    t0 = time.monotonic()
    index = start
    while (count is None or report.inputs < count) and (seconds is None or time.monotonic() - t0 < seconds):
        data = input_for(target, seeds, seed, index)
        outcome, problem = attempt(target, data)
        report.inputs += 1
        report.outcomes[outcome] += 1
        if problem is not None:
            report.findings.append(_record(target, data, index, problem, out_dir, command))
        if progress is not None and report.inputs % 50 == 0:
            report.seconds = time.monotonic() - t0
            progress(report)
        index += 1
    report.seconds = time.monotonic() - t0
    return report


def _record(target: Target, data: bytes, index: int, problem: Problem, out_dir: Path | None,
            command: str) -> Finding:
    finding = Finding(target.name, index, problem, command=f"{command} --start {index} --count 1")
    if out_dir is None:
        return finding
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{target.name}-{index}-{problem.kind}"
    finding.input = out_dir / f"{stem}.input"
    finding.input.write_bytes(data)
    if problem.kind != "hang":  # reducing a hang would wait out the time limit at every step

        def same(candidate: bytes) -> bool:
            _, p = attempt(target, candidate, seconds=5.0)
            return p is not None and p.signature == problem.signature

        finding.reduced = out_dir / f"{stem}.reduced"
        finding.reduced.write_bytes(reduce(data, same))
    return finding
