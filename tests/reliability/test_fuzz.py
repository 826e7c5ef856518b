"""``capsule fuzz`` (issue 15.1): the regular suite's sample of each target finds nothing, inputs are made again
from their seed, and the engine reports each kind of failure with a reproduction and a reduced input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capsule.fuzz import TARGETS, Target, attempt, input_for, run_target
from capsule.fuzz.reduce import reduce
from tests.clang import CORPUS, compile_bpf
from tests.wasm.wasm_build import compile_c

SEED = 15
SAMPLE = {"wasm": 400, "elf": 300, "meta": 200}  # inputs per target: about a minute in all
# the stages each sample must reach, or it proves little
REACHED = {"wasm": {"malformed or invalid", "ran"}, "elf": {"not an object", "loaded"},  # loaded: optimised too
           "meta": {"refused", "ran"}}

C_SEED = """
int table[64];
static int mix(int a, int b) { return (a * 31) ^ (b >> 3); }
int run(int n) {
    int acc = 0;
    for (int i = 0; i < n && i < 64; i++) { table[i] = mix(i, acc); acc += table[i] % 7; }
    return acc;
}
long long wide(long long x) { return x * 0x9E3779B97F4A7C15LL + (x >> 17); }
"""


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seeds the suite can make anywhere: a few corpus objects and a small C module."""
    d = tmp_path_factory.mktemp("seeds")
    for name in ("xdp_parse", "tc_switch", "maps_ringbuf", "syscall_globals", "subprogs"):
        shutil.copy(compile_bpf(CORPUS / f"{name}.c"), d / f"{name}.o")
    (d / "c_module.wasm").write_bytes(compile_c(C_SEED))
    return d


@pytest.mark.requires_bpf
@pytest.mark.parametrize("name", SAMPLE)
def test_sample_finds_nothing(name: str, seed_dir: Path, tmp_path: Path) -> None:
    target = TARGETS[name](True, [seed_dir])
    report = run_target(target, seed=SEED, count=SAMPLE[name], out_dir=tmp_path)
    print(f"\n{name}: {report.inputs} inputs in {report.seconds:.1f} s: {dict(report.outcomes)}")
    assert not report.findings, "\n".join(f"{f.problem.kind} at {f.problem.where}: {f.problem.message}\n  again: "
                                          f"{f.command}" for f in report.findings)
    assert REACHED[name] <= set(report.outcomes), report.outcomes


@pytest.mark.parametrize("name", SAMPLE)
def test_an_input_is_made_again_from_its_seed(name: str, seed_dir: Path) -> None:
    target = TARGETS[name](False, [seed_dir])
    seeds = target.seeds()
    made = [input_for(target, seeds, SEED, i) for i in range(20)]
    assert made == [input_for(target, seeds, SEED, i) for i in range(20)]
    # and they are mutations (a changed field may get the value it had: rarely the seed itself)
    assert len(set(made)) > 10 and sum(m in seeds for m in made) <= 2


class _Broken(Target):
    """A target with every kind of failure, chosen by the input's first byte."""

    name = "broken"

    def seeds(self) -> list[bytes]:
        return [b"k" + b"x" * 50 + b"KEY" + b"y" * 50]

    def run(self, data: bytes) -> str:
        if data[:1] == b"k" and b"KEY" in data:
            raise KeyError("deep inside")
        if data[:1] == b"l":
            os.open("/dev/null", os.O_RDONLY)  # never closed: a leak
        if data[:1] == b"h":  # working without end
            while True:
                pass
        if data[:1] == b"w":  # waiting without end
            while True:
                time.sleep(0.01)
        return "fine"


def test_each_kind_of_failure_is_reported() -> None:
    target = _Broken(False, [])
    fds = set(os.listdir("/proc/self/fd"))
    assert attempt(target, b"fine") == ("fine", None)
    outcome, problem = attempt(target, b"kKEY")
    assert outcome == "failed" and problem is not None and problem.kind == "traceback"
    assert problem.message == "KeyError: 'deep inside'"
    _, problem = attempt(target, b"l")
    assert problem is not None and problem.kind == "leak" and "/dev/null" in problem.message
    for fd in set(os.listdir("/proc/self/fd")) - fds:  # the leaked one (the listing's own is gone by now)
        if os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}") == "/dev/null":
            os.close(int(fd))
    _, problem = attempt(target, b"h", seconds=0.3)
    assert problem is not None and problem.kind == "hang" and "CPU time" in problem.message
    assert problem.where == "?"  # the loop is in the test, not in capsule
    _, problem = attempt(target, b"w", seconds=0.02)
    assert problem is not None and problem.kind == "hang" and "wall-clock time" in problem.message


def test_a_failure_is_written_reduced_with_its_command(tmp_path: Path) -> None:
    class _Keyed(_Broken):
        def mutate(self, data: bytes, rng: object) -> bytes:
            return data  # the seed itself fails

    report = run_target(_Keyed(False, []), seed=1, start=7, count=1, out_dir=tmp_path, command="capsule fuzz x")
    (f,) = report.findings
    assert f.command == "capsule fuzz x --start 7 --count 1"
    assert f.input is not None and f.input.read_bytes() == _Broken(False, []).seeds()[0]
    assert f.reduced is not None and f.reduced.read_bytes() == b"kKEY"


def test_reducer_keeps_what_the_failure_needs() -> None:
    data = b"".join(bytes([i]) for i in range(200)) + b"A" + bytes(300) + b"B" + bytes(50)
    assert reduce(data, lambda d: b"A" in d and b"B" in d and d.index(b"A") < d.index(b"B")) == b"AB"
    assert reduce(b"abc", lambda d: False) == b"abc"


def test_the_command(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "capsule.cli", "fuzz", "wasm", "meta", "--seed", "3", "--count",
                          "40", "--no-kernel", "--out", str(tmp_path / "failures"), "--report", str(report)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("wasm: 40 inputs in ")
    rows = json.loads(report.read_text())
    assert [(r["target"], r["inputs"], r["failures"]) for r in rows] == [("wasm", 40, []), ("meta", 40, [])]
