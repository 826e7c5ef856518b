"""The verifier's cost of every compiled program the suite loads (issue 12.3): processed instructions per static
instruction, reported at the end of the run against ``RATIO_TARGET`` and kept under ``RATIO_LIMIT``.

Verification that grows faster than the program is how a compiler change quietly makes large programs stop
loading; every compiled object a test loads is a sample. Each process (pytest-xdist workers included) records
what it loaded as JSON lines in one file per run; the controller reads them all at the end, prints the worst
ratios and fails the run if one is over the limit. The figure is the kernel's own count
(``bpf_prog_info.verified_insns``), so recording needs no verifier log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import capsule.kernel.sys as kernel_sys
from capsule.compiler import abi
from capsule.kernel import collection
from capsule.kernel.errors import BPFError

RATIO_TARGET = 2.0  # issue 12.3's target: reported, with every program over it
RATIO_LIMIT = 4.0  # a run fails past this: today's C programs with the WASI runtime (printf, malloc) are ~3.3
# tests whose programs are known to cost more than the limit (a test id prefix), with the highest ratio measured
# when they were recorded; none may grow 10% past its figure. Small objects in the no-may_goto profile pay for
# the dispatcher's unrolled loop, a fixed cost their few instructions do not amortise.
KNOWN = {
    # the bounded dispatcher split across programs: 41,774 processed for 2,144 instructions after 2026-12-02's
    # liveness and operand-store changes shrank its code (the ratio's denominator); 16.91 before
    "tests/compiler/test_differential.py::test_profiles_agree": 19.48,
    "tests/compiler/test_packing.py::test_many_physical_functions_agree_with_wasmtime": 11.04,
    "tests/compiler/test_differential.py::test_hash_table": 4.90,  # 10,366 / 2,114 (4.39 before its code shrank)
    "tests/compiler/test_map_window.py": 15.88,  # small spec objects, no-may_goto and map-window forms
    # 200 bulk operations with constant operands (the fuzz findings): 12-15x, each copy still walks a few
    # iterations of its loop (they were refused at 1M processed, 50x, before ``memory._forget``)
    "tests/compiler/test_bulk_verifier_cost.py": 15.05,
}
GROWTH = 1.1
SMALL = 2000  # below this many instructions a ratio says little (a dispatcher alone is a few hundred)
ENV = "CAPSULE_VERIFIER_COST_FILE"  # set by the controller, inherited by xdist's workers
SHOWN = 8


_REAL_SYSCALL = kernel_sys._syscall  # a test that stands in for bpf(2) (fault injection) is not recorded


def _record(coll: collection.Collection) -> None:
    """Note what ``coll`` cost; never fails the load it watches, and makes no bpf(2) call a test could count."""
    spec = coll.spec
    if spec is None or abi.META_SECTION not in spec.extra_sections or ENV not in os.environ \
            or kernel_sys._syscall is not _REAL_SYSCALL:
        return
    rows = []
    for name, prog in coll.programs.items():
        static = sum(i.slots() for i in spec.programs[name].insns)
        try:
            processed = prog.info().verified_insns
        except (BPFError, OSError):
            return
        rows.append({"program": name, "static": static, "processed": processed,
                     "test": os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]})
    with open(os.environ[ENV], "a") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


@pytest.fixture(autouse=True, scope="session")
def _verifier_cost_recorder() -> Iterator[None]:
    original = collection.Collection.load.__func__  # type: ignore[attr-defined]

    def load(cls: type[collection.Collection], *args: Any, **kw: Any) -> collection.Collection:
        coll: collection.Collection = original(cls, *args, **kw)
        _record(coll)
        return coll

    collection.Collection.load = classmethod(load)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        collection.Collection.load = classmethod(original)  # type: ignore[method-assign, assignment]


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) owns the file
        path = Path(config.rootpath) / ".cache" / "verifier-cost.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
        os.environ[ENV] = str(path)


def _rows() -> list[dict[str, Any]]:
    path = os.environ.get(ENV)
    if not path or not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def limit(row: dict[str, Any]) -> float:
    known = max((v for k, v in KNOWN.items() if row["test"].startswith(k)), default=None)
    return RATIO_LIMIT if known is None else max(RATIO_LIMIT, known * GROWTH)


def over_limit(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["static"] >= SMALL and r["processed"] > limit(r) * r["static"]]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    rows = _rows()
    if not rows:
        return
    big = sorted((r for r in rows if r["static"] >= SMALL), key=lambda r: -r["processed"] / r["static"])
    tr = terminalreporter
    tr.section("verifier cost of compiled programs (processed / static instructions)")
    over = sum(r["processed"] > RATIO_TARGET * r["static"] for r in big)
    tr.write_line(f"{len(rows)} programs loaded, {len(big)} of at least {SMALL} instructions, {over} of them over "
                  f"the {RATIO_TARGET}x target; worst ratios:")
    for r in big[:SHOWN]:
        tr.write_line(f"  {r['processed'] / r['static']:5.2f}  {r['processed']:>9,} / {r['static']:>9,}  "
                      f"{r['program']}  {r['test']}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    bad = over_limit(_rows())
    if bad and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        worst = max(bad, key=lambda r: r["processed"] / r["static"])
        print(f"\nverifier cost over its limit ({RATIO_LIMIT}x, or 10% over a known figure in "
              f"tests/verifier_cost.py) for {len(bad)} programs, worst: {worst['program']} of {worst['test']} "
              f"({worst['processed']:,} processed for {worst['static']:,} instructions)")
