"""Prints the spec testsuite's per-file count table at the end of the run (also under pytest-xdist)."""

from __future__ import annotations

import json

import pytest

_COLUMNS = [
    ("module ok", "modules"),
    ("assert_invalid ok", "invalid"),
    ("assert_invalid ok (malformed by encoding)", "inv/enc"),
    ("assert_malformed ok", "malformed"),
    ("assert_malformed (text, skipped)", "mal/text"),
    ("assert_unlinkable ok", "unlink"),
    ("assert_uninstantiable ok", "uninst"),
    ("dropped", "dropped"),
    ("fields removed", "fields"),
    ("dropped (execution commands)", "drop/exec"),
    ("xfail", "xfail"),
    ("mismatches", "MISMATCH"),
]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    rows = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        if report.when != "call":
            continue
        for key, value in report.user_properties:
            if key == "wast_counts":
                rows.append(json.loads(value))
    if not rows:
        return
    rows.sort(key=lambda r: r["file"])
    tw = terminalreporter
    tw.section("WebAssembly spec testsuite (capsule.wasm)")
    header = f"{'file':28}" + "".join(f"{short:>10}" for _, short in _COLUMNS)
    tw.write_line(header)
    totals = {key: 0 for key, _ in _COLUMNS}
    for row in rows:
        counts = row["counts"]
        tw.write_line(f"{row['file']:28}" + "".join(f"{counts.get(key, 0):>10}" for key, _ in _COLUMNS))
        for key, _ in _COLUMNS:
            totals[key] += counts.get(key, 0)
    tw.write_line(f"{'TOTAL':28}" + "".join(f"{totals[key]:>10}" for key, _ in _COLUMNS))
    dropped = [d for row in rows for d in row["dropped"]]
    if dropped:
        tw.write_line(
            f"{len(dropped)} forms/module fields wast2json 1.0.32 cannot convert (skipped, with reason):"
        )
        for line in dropped:
            tw.write_line(f"  {line}")
