"""The test suite on other kernels: boot each Debian kernel once (``capsule.testing.qemu``) and run, inside it,
``capsule probe``, the verifier over a fixed set of objects, and a selection of the test suite.

A suite says which tests and which kernels. What cannot pass on a kernel yet is written down here as an
expectation (``EXPECTED``: a kernel, the failure message it gives, and why), so a run tells apart the
failures the project already knows (6.1 has no arena until the map window lands) from new ones: only a
failure no expectation explains fails the run. The report gives per kernel: boot time, passed, failed,
expected failures, skipped, the profile picked, and the verifier's figures per program.

``python -m capsule.testing.vm [--suite smoke|full] [--kernel 6.1 ...] [--json FILE]`` runs it; ``make
test-kernels`` is the full suite on both kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from capsule.bpf.elf_write import write_object
from capsule.compiler import Options, compile_module
from capsule.kernel.profiles import profile
from capsule.sources.kernels import KERNELS, prepared
from capsule.toolchain.clang import compile_bpf
from capsule.toolchain.guest import build_wasm
from capsule.wasm import load

from .qemu import VM, VMResult, VMTimeout

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus"
PROGRAMS = REPO / "tests" / "programs"
# objects the verifier's figures are taken on: clang-19 output for cpu v3 (every kernel here runs it). Not
# loops_switch.c: 6.1 walks its loops to the 1M-insn limit, minutes under TCG for a known answer (docs/KERNELS.md)
FIGURE_SOURCES = ("xdp_parse.c", "subprogs.c", "tc_switch.c", "socket_ldabs.c")
FIGURE_CPU = "v3"
JUNIT = ("junit.xml", "junit-long.xml")  # the suite's pytest run, and the kernel's long run
MAP_V3 = profile("map-v3").build_options()


@dataclass(frozen=True)
class Suite:
    name: str
    tests: tuple[str, ...]  # pytest arguments: files, directories, node ids, -k expressions
    kernels: tuple[str, ...]
    timeout: float  # seconds for one VM, boot included
    figures: tuple[str, ...] = FIGURE_SOURCES  # tests/corpus programs whose verifier figures are reported
    programs: tuple[str, ...] = ("strings.c",)  # tests/programs built by capsule, for the same figures
    #: kernel -> a second pytest run there, after the first (the long runs of programs on that kernel's tier)
    long: dict[str, tuple[str, ...]] = field(default_factory=dict)


SUITES = {
    # CI's: one boot of 6.1, the probes, the loader's map and program tests, and the refusal of an arena build
    "smoke": Suite("smoke", ("tests/kernel/test_probe.py", "tests/kernel/test_maps.py", "tests/kernel/test_prog.py",
                             "tests/testing/test_refusal.py"), ("6.1",), 420, ("xdp_parse.c", "socket_ldabs.c")),
    # make test-kernels: the kernel layer whole, and programs compiled by capsule
    # the map window on 6.1: the map tier's own tests (built for map-v3; not Lua, whose compile and verification
    # take 100 s on the host and most of an hour under TCG), and the refusal of an arena build
    "map": Suite("map", ("tests/compiler/test_map_window.py", "tests/testing/test_refusal.py", "-k", "not lua"),
                 ("6.1",), 3000, ("xdp_parse.c",)),
    # on 6.1 also Lua's scripts on the map window (map-v3): under TCG its compile and verification take most of
    # an hour, hence the timeout
    "full": Suite("full", ("tests/kernel", "tests/testing/test_refusal.py", "tests/wasi/test_programs.py",
                           "-k", "not wasmtime and not megabytes"), ("6.1", "6.12"), 3 * 3600,
                  long={"6.1": ("tests/compiler/test_map_window.py", "-k", "lua and map-v3")}),
}


@dataclass(frozen=True)
class Expectation:
    """On ``kernel``, a test (whose id contains ``test``) failing with a message that matches ``message`` fails
    for a known reason, ``why``."""

    kernel: str
    message: str  # a regular expression searched in the failure's message and text
    why: str
    test: str = ""


EXPECTED = (
    Expectation("6.1", r"lacks BPF_MAP_TYPE_ARENA",
                "built for the arena window, which 6.1 lacks: compiled programs need the map window (issue 14 item 2)"),
    Expectation("6.1", r"creating ARENA map", "BPF_MAP_TYPE_ARENA came in 6.9"),
    Expectation("6.1", r"lacks (may_goto|cpu v4)", "built with may_goto or for cpu v4 (clang -mcpu=v4)"),
    Expectation("6.1", r"not found in /sys/kernel/btf/vmlinux|is not in this kernel's BTF",
                "calls a kfunc newer than 6.1"),
    Expectation("6.1", r"BPF program is too large", "6.1 walks this program's loops to the 1M-instruction limit"),
    Expectation("6.1", r"EINVAL", "6.1 refuses a verifier log buffer under 128 bytes (EINVAL) instead of "
                "growing it", test="test_small_log_buffer_grows"),
)


@dataclass
class TestCase:
    __test__ = False  # not a pytest class

    id: str
    outcome: str  # passed, failed, expected, skipped
    message: str = ""


@dataclass
class KernelReport:
    kernel: str
    release: str = ""
    boot_seconds: float = 0.0
    run_seconds: float = 0.0
    status: int | None = None
    profile: str | None = None
    probes: list[dict[str, object]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    tests: list[TestCase] = field(default_factory=list)
    figures: list[dict[str, object]] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.counts.get("failed", 0) == 0 and bool(self.tests)


# -- inside the guest ----------------------------------------------------------------------------------------
# the guest's first Python process: the probes (as ``capsule probe --json``) and the verifier's figures (as
# ``capsule verify --json``) in one interpreter, since each start costs seconds under TCG
GUEST_FIGURES = """
import contextlib, json, sys
from capsule.cli import main
from capsule.bpf.elf import read_object
from capsule.cli.inspect import verify_rows
out, objs = sys.argv[1], sys.argv[2:]
with open(out + "/probe.json", "w") as f, contextlib.redirect_stdout(f):
    main(["probe", "--json"])
for o in objs:
    try:
        rows = verify_rows(o)
    except (Exception, SystemExit) as e:  # refused before any program (a map): a row for each program
        rows = [{"program": p, "verdict": "failure", "reason": str(e)} for p in read_object(o).programs]
    with open(o[:-2] + ".json", "w") as f:
        json.dump(rows, f)
"""


def guest_command(suite: Suite, out: Path, figures: list[Path], kernel: str = "") -> str:
    """The shell script the guest runs: probes and verifier figures, then pytest, and the kernel's long run
    if the suite has one (the script's status is the last pytest's, but each writes its own JUnit report)."""
    py = shlex.quote(sys.executable)
    objs = " ".join(shlex.quote(str(o)) for o in figures)
    script = f"{py} - {shlex.quote(str(out))} {objs} <<'EOF'\n{GUEST_FIGURES.strip()}\nEOF\n"
    runs = [suite.tests] + ([suite.long[kernel]] if kernel in suite.long else [])
    for k, tests in enumerate(runs):
        junit = shlex.quote(str(out / JUNIT[k]))
        script += f"{py} -m pytest -q -p no:cacheprovider --junitxml={junit} {shlex.join(tests)}\n"
    return script


def figure_objects(out: Path, sources: tuple[str, ...] = FIGURE_SOURCES, programs: tuple[str, ...] = ()) -> list[Path]:
    """The figures' objects, compiled on the host into ``out`` (clang-19 and capsule's compiler are slow in the
    guest): clang's for cpu v3 from ``tests/corpus``, and capsule builds of ``tests/programs`` for arena-v4 and
    for map-v3."""
    objs = [compile_bpf(CORPUS / name, out / f"{Path(name).stem}.{FIGURE_CPU}.o", mcpu=FIGURE_CPU) for name in sources]
    for name in programs:
        wasm = build_wasm([PROGRAMS / name], ["-O2"]).wasm
        for tag, options in (("capsule", Options()), ("capsule-map-v3", Options(**MAP_V3))):
            obj = out / f"{Path(name).stem}.{tag}.o"
            write_object(compile_module(load(wasm.read_bytes()), options), obj)
            objs.append(obj)
    return objs


# -- reading the results -------------------------------------------------------------------------------------
def read_junit(path: Path, kernel: str) -> list[TestCase]:
    """pytest's JUnit XML as test cases, failures matched against ``EXPECTED`` for ``kernel``."""
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        cid = f"{tc.get('classname', '')}::{tc.get('name', '')}"
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        if bad is not None:
            text = f"{bad.get('message', '')}\n{bad.text or ''}"
            why = expected_reason(kernel, cid, text)
            first = bad.get("message", "").strip().splitlines()[:1]
            cases.append(TestCase(cid, "expected" if why else "failed", why or (first[0] if first else "")))
        elif tc.find("skipped") is not None:
            cases.append(TestCase(cid, "skipped", tc.find("skipped").get("message", "")))  # type: ignore[union-attr]
        else:
            cases.append(TestCase(cid, "passed"))
    return cases


def expected_reason(kernel: str, test: str, text: str) -> str | None:
    for e in EXPECTED:
        if e.kernel == kernel and e.test in test and re.search(e.message, text):
            return e.why
    return None


def read_figures(objs: list[Path]) -> list[dict[str, object]]:
    rows = []
    for o in objs:
        path = o.with_suffix(".json")
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            text = path.read_text().strip() if path.exists() else "no output"
            found = [{"program": "?", "verdict": "failure", "reason": text.splitlines()[-1] if text else "no output"}]
        for row in found:
            rows.append({"object": o.name, **row})
    return rows


# -- one kernel, then all ------------------------------------------------------------------------------------
def run_kernel(label: str, suite: Suite, *, echo: Callable[[str], None] | None = None,
               timeout: float | None = None) -> KernelReport:
    """Boot ``label`` once and run ``suite`` in it."""
    report = KernelReport(label)
    kernel = prepared(label)
    report.release = kernel.release
    with tempfile.TemporaryDirectory(prefix=f"capsule-vm-{label}-") as tmp:
        out = Path(tmp)
        objs = figure_objects(out, suite.figures, suite.programs)
        vm = VM(kernel, guest_command(suite, out, objs, label), out=out, cwd=REPO, echo=echo)
        limit = timeout or suite.timeout
        start = time.monotonic()
        try:
            result: VMResult = vm.run(limit)
        except VMTimeout as e:  # a report of what is known, not a traceback: pytest's reports come at its end
            tail = [line for line in e.console.splitlines() if line.strip()][-1:]
            report.error = f"{e}; the console's last line: {tail[0] if tail else '(none)'}"
            report.run_seconds = time.monotonic() - start
            return report
        report.status, report.boot_seconds, report.run_seconds = result.status, result.boot_seconds, result.run_seconds
        try:
            probe = json.loads((out / "probe.json").read_text())
            report.probes, report.profile = probe["probes"], probe["profile"]
        except (OSError, ValueError, KeyError) as e:
            report.error = f"capsule probe gave no report ({e})"
        for name in JUNIT[:1 + (label in suite.long)]:
            if (out / name).exists():
                report.tests += read_junit(out / name, label)
            elif not report.error:
                report.error = f"pytest wrote no {name}; console tail:\n" + "\n".join(result.console.splitlines()[-20:])
        report.figures = read_figures(objs)
    for outcome in ("passed", "failed", "expected", "skipped"):
        report.counts[outcome] = sum(1 for t in report.tests if t.outcome == outcome)
    return report


def host_report(suite: Suite) -> KernelReport:
    """The running kernel's probes and figures for the same objects (the guests' script, run here)."""
    report = KernelReport("host", os.uname().release)
    with tempfile.TemporaryDirectory(prefix="capsule-vm-host-") as tmp:
        out = Path(tmp)
        objs = figure_objects(out, suite.figures, suite.programs)
        res = subprocess.run([sys.executable, "-", str(out), *map(str, objs)], input=GUEST_FIGURES, text=True,
                             capture_output=True, cwd=REPO, check=False)
        try:
            probe = json.loads((out / "probe.json").read_text())
            report.probes, report.profile = probe["probes"], probe["profile"]
        except (OSError, ValueError, KeyError):
            report.error = f"probing the host failed: {res.stderr.strip()[-300:]}"
        report.figures = read_figures(objs)
    return report


def format_report(reports: list[KernelReport]) -> str:
    lines = [f"{'kernel':8} {'release':22} {'boot s':>7} {'run s':>7} {'passed':>7} {'failed':>7} {'expected':>9} "
             f"{'skipped':>8}  profile"]
    for r in reports:
        c = r.counts
        lines.append(f"{r.kernel:8} {r.release:22} {r.boot_seconds:7.1f} {r.run_seconds:7.1f} {c.get('passed', 0):7} "
                     f"{c.get('failed', 0):7} {c.get('expected', 0):9} {c.get('skipped', 0):8}  {r.profile}")
    for r in reports:
        if r.error:
            lines.append(f"{r.kernel}: {r.error}")
        for t in r.tests:
            if t.outcome == "failed":
                lines.append(f"{r.kernel}: FAILED {t.id}: {t.message}")
        whys: dict[str, int] = {}
        for t in r.tests:
            if t.outcome == "expected":
                whys[t.message] = whys.get(t.message, 0) + 1
        lines += [f"{r.kernel}: {n} expected failures: {why}" for why, n in whys.items()]
    lines.append("")
    lines.append(f"{'verifier figures':40} " + " ".join(f"{r.kernel:>34}" for r in reports))
    keys = list(dict.fromkeys((f["object"], f["program"]) for r in reports for f in r.figures))
    for obj, prog in keys:
        cells = []
        for r in reports:
            row = next((f for f in r.figures if (f["object"], f["program"]) == (obj, prog)), None)
            if row is None:
                cells.append("-")
            elif row.get("verdict") == "success":
                cells.append(f"{row.get('processed_insns')} insns {row.get('verification_time_us')} us")
            else:
                cells.append("refused: " + str(row.get("reason", ""))[:26])
        lines.append(f"{f'{obj} {prog}':40} " + " ".join(f"{c:>34}" for c in cells))
    return "\n".join(lines)


def echo_for(label: str) -> Callable[[str], None]:
    """Echo a guest's console lines, each tagged with its kernel."""
    def echo(line: str) -> None:
        print(f"  [{label}] {line}")
    return echo


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m capsule.testing.vm",
                                description="Boot Debian kernels under qemu and run the test suite inside them.")
    p.add_argument("--suite", choices=sorted(SUITES), default="full")
    p.add_argument("--kernel", action="append", choices=sorted(KERNELS), help="only this kernel (repeatable)")
    p.add_argument("--json", type=Path, help="write the reports as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="do not echo the guests' consoles")
    args = p.parse_args(argv)
    suite = SUITES[args.suite]
    reports = []
    for label in args.kernel or suite.kernels:
        start = time.monotonic()
        print(f"== booting Debian's {label} kernel (suite {suite.name})", flush=True)
        reports.append(run_kernel(label, suite, echo=None if args.quiet else echo_for(label)))
        print(f"== {label}: done in {time.monotonic() - start:.0f} s\n{format_report(reports[-1:])}", flush=True)
        if args.json:  # after each kernel, so an interrupted run keeps what it measured
            args.json.write_text(json.dumps([asdict(r) for r in reports], indent=2))
    host = host_report(suite)
    print(format_report(reports + [host]))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in reports + [host]], indent=2))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
