"""``capsule bench integers`` at tiny sizes: every kernel builds natively, for wasm and for the kernel, and
the three runtimes give the same result. No timing is asserted (timings depend on the machine)."""

from __future__ import annotations

import argparse
import json

import pytest

from capsule.bench import integers
from capsule.bench.integers import KERNELS, TINY, render_table, run_one
from capsule.cli.bench import add_parsers
from tests.fds import bpf_fd_count

pytestmark = pytest.mark.requires_bpf


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_agrees_in_all_three_runtimes(name: str) -> None:
    before = bpf_fd_count()
    row = run_one(name, TINY[name], reps=2)
    assert row.error is None, row.error
    assert row.agree, (row.native_result, row.wasmtime_result, row.kernel_result)
    assert len(row.native_ns) == len(row.wasmtime_ns) == len(row.kernel_ns) == 2
    assert all(t > 0 for t in row.kernel_ns)  # bpf_stats really timed the calls
    assert row.invocations >= 1 and row.bpf_insns > 0
    assert bpf_fd_count() == before


def test_known_answers() -> None:
    """The kernels compute what they say (checked against Python at tiny sizes)."""
    assert run_one("fib", 20, reps=1).kernel_result == 6765
    primes = [p for p in range(2, 1001) if all(p % d for d in range(2, int(p**0.5) + 1))]
    assert run_one("sieve", 1000, reps=1).kernel_result == len(primes) * 1_000_000_007 + sum(primes)


def test_disagreement_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integers, "run_wasmtime", lambda wasm, n, reps: (12345, [1] * reps))
    row = run_one("fib", 10, reps=1)
    assert not row.agree
    assert "NO" in render_table([row])


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    add_parsers(p.add_subparsers(dest="command"))
    args = p.parse_args(
        ["bench", "integers", "--tiny", "--kernel", "crc32", "--kernel", "fib", "--reps", "1", "--json"]
    )
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in out["results"]] == ["crc32", "fib"]
    assert all(r["agree"] for r in out["results"])
    args = p.parse_args(["bench", "integers", "--kernel", "fib", "--n", "fib=12", "--reps", "1"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "| fib | 12 |" in text and "yes |" in text
