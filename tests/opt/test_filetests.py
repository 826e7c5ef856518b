"""Runs the text fixtures of ``tests/opt/filetests/<pass>/*.txt`` (format: ``tests/opt/filetest.py``): each
program, after the file's passes, must print as its expectation; a difference fails with a unified diff, or
with ``--bless`` (``CAPSULE_BLESS=1``) is written into the file."""

from __future__ import annotations

import difflib
import os
import re

import pytest

from capsule.bpf.text import TextError, parse

from .filetest import ROOT, Filetest, FiletestError, bless, expectation, read, run

FILES = sorted(ROOT.glob("*/*.txt"))
CASES = [(ft, case) for ft in map(read, FILES) for case in ft.cases]


def test_every_pass_has_fixtures() -> None:
    from capsule.opt.passes import PASSES

    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir()) == sorted(PASSES)
    per_pass = {name: sum(len(ft.cases) for ft in map(read, (ROOT / name).glob("*.txt"))) for name in PASSES}
    assert all(n >= 3 for n in per_pass.values()), per_pass


@pytest.mark.parametrize(("ft", "case"), CASES, ids=[f"{ft.path.relative_to(ROOT)}::{c.name}" for ft, c in CASES])
def test_filetest(ft: Filetest, case, request: pytest.FixtureRequest) -> None:
    before, after, counts = run(ft, case)
    got = expectation(ft, before, after, counts)
    if got != ["; unchanged"]:  # what the file expects is itself a program: it reads back as the output
        listed = parse("\n".join(line[1:] for line in got[1:])).insns
        assert [(i.encode(), i.ref) for i in listed] == [(i.encode(), i.ref) for i in after.insns]
    if got == case.expect:
        return
    if request.config.getoption("--bless") or os.environ.get("CAPSULE_BLESS") == "1":
        bless(ft.path, case.name, got)
        return
    diff = "\n".join(difflib.unified_diff(case.expect or [], got, f"{ft.path.name}::{case.name} (expected)",
                                          "after the passes", lineterm=""))
    pytest.fail(f"{ft.path}:{case.first}: {case.name} is not what the file expects "
                f"(rerun with --bless or CAPSULE_BLESS=1 to accept):\n{diff}", pytrace=False)


# -- the format itself ---------------------------------------------------------------------------------------
SAMPLE = """\
; a file made in the test
passes constprop
type syscall

; first: folded
program folds
    r1 = 0x5
    r1 += 0x3
    r0 = r1
    exit

; second: nothing to do, and a stale expectation
program alone
    r0 = *(u32 *)(r1 + 0x0)
    exit
; rewrites: 7
;     exit
"""


def test_bless_writes_missing_and_stale_expectations_and_keeps_the_rest(tmp_path) -> None:
    path = tmp_path / "sample.txt"
    path.write_text(SAMPLE)
    ft = read(path)
    assert [(c.name, c.expect) for c in ft.cases] == [("folds", None), ("alone", ["; rewrites: 7", ";     exit"])]
    for case in ft.cases:
        bless(path, case.name, expectation(ft, *run(ft, case)))
    blessed = path.read_text()
    assert blessed == SAMPLE.replace("    exit\n\n; second", "    exit\n; rewrites: 4\n;     r0 = 0x8\n;     exit\n\n"
                                     "; second").replace("; rewrites: 7\n;     exit\n", "; unchanged\n")
    again = read(path)
    assert all(expectation(again, *run(again, c)) == c.expect for c in again.cases)


@pytest.mark.parametrize(("text", "message"), [
    ("program p\n    exit\n", "no 'passes' line"),
    ("passes nosuch\n", "unknown pass 'nosuch'"),
    ("passes peephole\ntype martian\n", "unknown program type 'martian'"),
    ("passes peephole\nwhat is this\n", "expected 'passes', 'type' or 'program'"),
    ("passes peephole\nprogram p\n    exit\n; unchanged\n    r0 = 0x0\n", "text after 'p''s expectation"),
    ("passes peephole\nprogram p\n    exit\nprogram p\n    exit\n", "two programs with one name"),
])
def test_malformed_files_are_clear_errors(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(FiletestError, match=re.escape(message)):
        read(path)


def test_a_bad_program_names_the_line_of_the_file(tmp_path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("passes peephole\n\nprogram p\n    r0 = 0x0\n    r0 =+ 1\n    exit\n")
    ft = read(path)
    with pytest.raises(TextError, match=r"^line 5: not a BPF instruction: 'r0 =\+ 1'"):
        run(ft, ft.cases[0])
