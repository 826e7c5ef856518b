"""The WebAssembly spec testsuite *executed in the kernel*: every module compiled (checked mode) and loaded,
every assertion run as a BPF program, per .wast file.

A file fails on any failed assertion not in XFAIL, and on any XFAIL entry that no longer fails. Skips are
only the two categories ``capsule.testing.wast_exec`` knows (float arithmetic, calls to host functions),
each with its reason; the per-file counts are printed in a table at the end of the session (conftest).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from capsule.testing.wast_exec import ExecReport, Result, matches, parse_arg, run_script

SUITE = Path("/work/shared/wasm-testsuite")
CACHE = Path(__file__).parents[2] / ".cache" / "wast"

FILES = [
    "i32", "i64", "int_exprs", "int_literals", "block", "br", "br_if", "br_table", "loop", "if", "call",
    "call_indirect", "fac", "func_ptrs", "select", "return", "switch", "stack", "labels", "local_get",
    "local_set", "local_tee", "global", "memory", "address", "load", "store", "memory_grow", "memory_size",
    "memory_trap", "traps", "unreachable", "nop", "left-to-right", "endianness", "forward", "binary",
    "binary-leb128",
    # floats (soft-float, issue 4)
    "f32", "f64", "f32_cmp", "f64_cmp", "f32_bitwise", "f64_bitwise", "conversions", "float_exprs",
    "float_misc", "float_literals", "float_memory",
    # bulk memory and more of the core
    "memory_fill", "func", "names", "const", "table", "type",
]

#: capsule's own scripts, for what the suite's copy does not cover (its memory_grow.wast is multi-memory)
LOCAL = Path(__file__).parent / "wast"
SCRIPTS = [SUITE / f"{name}.wast" for name in FILES] + sorted(LOCAL.glob("*.wast"))

#: "file:line" of a command (or of the module an action runs against) -> why it cannot pass.
XFAIL = {
    "memory_grow.wast:1": "multi-memory (two memories): capsule compiles one memory only",
    "memory_grow.wast:7": "multi-memory (four memories, two imported): capsule compiles one memory only",
    "memory_grow.wast:81": "multi-memory (two memories): capsule compiles one memory only",
}

#: files whose every module is in XFAIL
NOTHING_RUNS = {"memory_grow.wast"}


def _xfail_key(wast: str, r: Result) -> str | None:
    for line in (r.line, r.module_line):
        key = f"{wast}:{line}"
        if line is not None and key in XFAIL:
            return key
    return None


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.requires_bpf
@pytest.mark.parametrize("wast", SCRIPTS, ids=[w.stem for w in SCRIPTS])
def test_spec_file(wast: Path, record_property: pytest.RecordProperty) -> None:
    fds = _open_fds()
    report: ExecReport = run_script(wast, CACHE)
    assert _open_fds() == fds, "the executor leaked file descriptors (an Instance not closed?)"
    failures = report.failures()
    unexpected = [r for r in failures if _xfail_key(wast.name, r) is None]
    still_failing = {_xfail_key(wast.name, r) for r in failures} - {None}
    mine = {k for k in XFAIL if k.split(":")[0] == wast.name}
    fixed = sorted(mine - still_failing)
    counts = report.counts
    counts["xfail"] = len(failures) - len(unexpected)
    counts["failed"] = len(unexpected)
    record_property("spec_exec", json.dumps({"file": wast.name, "counts": dict(counts),
                                             "seconds": round(report.seconds, 2)}))
    print(wast.name, dict(counts), f"{report.seconds:.2f}s")
    for r in report.results:
        if r.status == "skipped":
            print(f"  skipped {wast.name}:{r.line}: {r.detail}")
    assert not unexpected, "\n".join(f"{wast.name}:{r.line}: {r.kind}: {r.detail}" for r in unexpected)
    assert not fixed, f"XFAIL entries that now pass (remove them): {fixed}"
    if wast.name not in NOTHING_RUNS:
        assert counts["passed"] + counts["validation passed"] > 0, "nothing of this file ran"


def test_values_compare_bits_and_nan_classes() -> None:
    assert parse_arg({"type": "i32", "value": "4294967295"}) == 0xFFFF_FFFF
    assert parse_arg({"type": "f64", "value": "9221120237041090560"}) == 0x7FF8_0000_0000_0000
    assert matches({"type": "i32", "value": "4294967295"}, -1)
    assert not matches({"type": "i32", "value": "4294967295"}, 0x7FFF_FFFF)
    assert matches({"type": "i64", "value": "18446744073709551615"}, -1)
    # floats are bit patterns: -0.0 is not 0.0
    assert not matches({"type": "f32", "value": "0"}, 0x8000_0000)
    assert matches({"type": "f32", "value": "nan:canonical"}, 0xFFC0_0000)
    assert not matches({"type": "f32", "value": "nan:canonical"}, 0x7FC0_0001)
    assert matches({"type": "f32", "value": "nan:arithmetic"}, 0x7FC0_0001)
    assert not matches({"type": "f32", "value": "nan:arithmetic"}, 0x7F80_0001)  # signalling
    assert matches({"type": "f64", "value": "nan:canonical"}, 0x7FF8_0000_0000_0000)
    assert not matches({"type": "f64", "value": "nan:arithmetic"}, 0x7FF0_0000_0000_0001)


@pytest.mark.requires_bpf
def test_failures_are_reported_not_hidden(tmp_path: Path) -> None:
    """A wrong expectation, a wrong trap text, a missing trap and an undeclared import all fail; float
    arithmetic runs (soft-float)."""
    wast = tmp_path / "wrong.wast"
    wast.write_text(
        '(module (func (export "one") (result i32) (i32.const 1))\n'
        '  (func (export "neg") (param f32) (result f32) (f32.sqrt (local.get 0)))\n'
        '  (func (export "div") (param i32) (result i32) (i32.div_u (i32.const 1) (local.get 0))))\n'
        '(assert_return (invoke "one") (i32.const 2))\n'
        '(assert_return (invoke "one") (i32.const 1))\n'
        '(assert_trap (invoke "div" (i32.const 0)) "integer overflow")\n'
        '(assert_trap (invoke "div" (i32.const 1)) "integer divide by zero")\n'
        '(assert_return (invoke "neg" (f32.const 1)) (f32.const 1))\n'
        '(module (import "nowhere" "g" (global i32)))\n'
    )
    report = run_script(wast, tmp_path / "cache")
    status = {r.line: (r.status, r.detail) for r in report.results}
    assert status[1][0] == "passed"
    assert status[4][0] == "failed" and "got [1]" in status[4][1]
    assert status[5][0] == "passed"
    assert status[6][0] == "failed" and "integer divide by zero" in status[6][1]
    assert status[7][0] == "failed" and "returned [1]" in status[7][1]
    assert status[8][0] == "passed"
    assert status[9][0] == "failed" and "unknown import" in status[9][1]


@pytest.mark.requires_bpf
def test_linking_registering_and_instantiation_failures(tmp_path: Path) -> None:
    """register/named modules/get, spectest globals, import matching, and traps during instantiation."""
    wast = tmp_path / "link.wast"
    wast.write_text(
        '(module $A (global (export "g") i32 (i32.const 42)) (func (export "f") (result i32) (i32.const 5)))\n'
        '(register "A" $A)\n'
        '(module $B (import "A" "g" (global $g i32)) (import "spectest" "global_i64" (global $s i64))\n'
        '  (func (export "sum") (result i64) (i64.add (i64.extend_i32_u (global.get $g)) (global.get $s))))\n'
        '(assert_return (invoke $B "sum") (i64.const 708))\n'
        '(assert_return (invoke $A "f") (i32.const 5))\n'
        '(assert_return (get $A "g") (i32.const 42))\n'
        '(assert_unlinkable (module (import "A" "g" (global i64))) "incompatible import type")\n'
        '(assert_unlinkable (module (import "A" "nope" (func))) "unknown import")\n'
        '(assert_unlinkable (module (import "spectest" "memory" (memory 3))) "incompatible import type")\n'
        '(assert_uninstantiable (module (memory 1) (data (i32.const 65535) "ab")) "out of bounds memory access")\n'
        '(assert_return (invoke "sum") (i64.const 708))\n'
    )
    fds = _open_fds()
    report = run_script(wast, tmp_path / "cache")
    assert _open_fds() == fds
    assert [(r.line, r.status) for r in report.results if r.status != "passed"] == []
    assert [r.kind for r in report.results].count("assert_unlinkable") == 3
