"""Prints the in-kernel spec execution table at the end of the run (also under pytest-xdist: the counts travel
as user properties of each test report)."""

from __future__ import annotations

import json

import pytest

_COLUMNS = [
    ("passed", "passed"),
    ("validation passed", "valid"),
    ("skipped: float", "skip/flt"),
    ("skipped: host call", "skip/host"),
    ("n/a: text", "n/a/text"),
    ("n/a: dropped", "n/a/drop"),
    ("xfail", "xfail"),
    ("failed", "FAILED"),
]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    rows = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        if report.when != "call":
            continue
        for key, value in report.user_properties:
            if key == "spec_exec":
                rows.append(json.loads(value))
    if not rows:
        return
    rows.sort(key=lambda r: r["file"])
    tw = terminalreporter
    tw.section("WebAssembly spec testsuite executed in the kernel (capsule.testing.wast_exec)")
    tw.write_line(f"{'file':24}" + "".join(f"{short:>10}" for _, short in _COLUMNS) + f"{'seconds':>9}")
    totals = {key: 0 for key, _ in _COLUMNS}
    seconds = 0.0
    for row in rows:
        counts = row["counts"]
        tw.write_line(f"{row['file']:24}" + "".join(f"{counts.get(k, 0):>10}" for k, _ in _COLUMNS)
                      + f"{row['seconds']:>9.2f}")
        for key, _ in _COLUMNS:
            totals[key] += counts.get(key, 0)
        seconds += row["seconds"]
    tw.write_line(f"{'TOTAL':24}" + "".join(f"{totals[k]:>10}" for k, _ in _COLUMNS) + f"{seconds:>9.2f}")
    tw.write_line("skip/flt: float arithmetic the compiler cannot lower; skip/host: calls an imported host function; "
                  "n/a/text: text-format assert_malformed/invalid (capsule reads binaries); n/a/drop: defined in "
                  "a module field wast2json 1.0.32 cannot convert")
