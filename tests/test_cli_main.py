"""capsule.cli: the one table from error to exit status, and the one ``bench`` group (no kernel needed)."""

from __future__ import annotations

import argparse
import io
import sys

import pytest

from capsule.cli import build_parser, report
from capsule.cli.common import Failure, about
from capsule.runtime.errors import CallError, GuestTrap
from capsule.toolchain.clang import ToolchainError


def test_an_error_is_one_line_about_its_subject(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Failure) as e, about("prog.c"):
        raise ToolchainError("clang-19 is not installed")
    assert report(e.value) == 1
    assert capsys.readouterr().err == "capsule: prog.c: clang-19 is not installed\n"
    assert report(CallError("no exported function 'f'")) == 1
    assert capsys.readouterr().err == "capsule: no exported function 'f'\n"


def test_statuses_and_hints(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert report(PermissionError(1, "Operation not permitted")) == 1
    assert capsys.readouterr().err.endswith("(loading BPF programs needs root or CAP_BPF)\n")
    assert report(GuestTrap("unreachable", [])) == 1  # a trap is a result only for run (134) and call (2)
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert report(Failure("a.o", BrokenPipeError())) == 0  # `capsule disasm a.o | head`: quiet
    assert stderr.closed


def test_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(KeyError):
        report(Failure("prog.c", KeyError("not in the table")))


def test_one_bench_group_with_every_bench() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bench = sub.choices["bench"]
    group = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(group.choices) == ["hooks", "integers", "loops", "opt", "programs"]
    assert [c.help for c in sub._choices_actions if c.dest == "bench"] == [
        "benchmarks (loop mechanisms, integer kernels, real programs, optimiser, packet hooks)"]
    assert build_parser().parse_args(["bench", "loops", "--n", "5"]).func.__module__ == "capsule.bench.loops"
