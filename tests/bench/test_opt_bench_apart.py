"""``capsule bench opt`` counts objects with code outside any program apart (issue 16.1): such code is neither
optimised nor in any total, and the report says how much there is and where."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from capsule.bench.opt import render, run_bench
from tests.clang import CORPUS, compile_bpf

TEXT_ONLY = """
int func(void *ctx) { return ((int *)ctx)[0] + 1; }
int other(int y) { return y * 3 + 2; }
"""


def test_objects_with_code_outside_programs_are_counted_apart() -> None:
    text_only = compile_bpf(TEXT_ONLY, "v3")
    xdp = compile_bpf(CORPUS / "xdp_parse.c", "v3")
    report = run_bench([("local", "text_only", "-", Path(text_only)), ("local", "xdp_parse", "-", Path(xdp))],
                       ["constprop"], check=False, per_pass=False)
    assert [a["object"] for a in report.apart] == ["text_only"]
    apart = report.apart[0]
    assert apart["slots"] > 0 and "'func'" in apart["why"] and "'other'" in apart["why"]
    assert {r.object for r in report.rows} == {"xdp_parse"}  # its programs are measured as before
    buf = io.StringIO()
    render(report, Console(file=buf, width=260, color_system=None))
    text = buf.getvalue()
    assert "1 object holds code outside any program" in text and "text_only" in text
