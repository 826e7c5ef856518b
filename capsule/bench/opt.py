"""``capsule bench opt``: what the optimiser saves on real programs, measured the way the Merlin paper did.

For every program of every object of the corpus (``opt_corpus``; or ``--objects`` given on the command line):

- NI, instruction slots before and after (``ld_imm64`` counts two, as the kernel counts);
- when the kernel can load the original: NPI (the verifier's processed instructions, log level 1|4), the
  verification time and the JITed size, before and after. The optimiser runs with its kernel checker, so every
  pass result that fails to verify or behaves differently is rolled back and counted (never shipped);
- the optimiser's own time (the passes, not the checking);
- the per-pass contribution: each pass run alone (NI only, no checking).

Programs the kernel refuses even before optimisation (fentry/LSM need trampolines, struct_ops, module BTF,
...) are "not loadable" and measured on NI only. The verification time is the smaller of two loads on each
side, since one load is noisy.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capsule.bpf.spec import ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapType
from capsule.kernel.maps import possible_cpus

if TYPE_CHECKING:
    from capsule.bpf.elf_sections import SectionType

Progress = Callable[[str], None]

# The paper's figures (Mao et al., ASPLOS 2024): average NI reduction per suite, NPI and verification time.
PAPER_NI = {"Sysdig": 59.8, "Tetragon": 7.5, "Tracee": 6.2, "XDP (up to)": 22.0}
# our suite of the same kind, where we have one (Tetragon and Tracee are not in Debian)
# (the paper's XDP figure is a maximum: ours is the largest per-program reduction in xdp-tools)
OUR_COUNTERPART = {"Sysdig": ("sysdig", "avg"), "XDP (up to)": ("xdp-tools", "max")}
PAPER_NPI = 17.1
PAPER_VTIME = 25.4
PAPER_SECONDS_PER_XDP_PROGRAM = 0.035
TARGET_S_PER_KINSN = 0.05
# the optimiser runs 7 times per program (the pipeline, then each pass alone): bound the run time by default
DEFAULT_MAX_INSNS = 4000


@dataclass
class ProgramRow:
    """One program: its figures before and after, how it was checked, and what each pass alone saves."""

    suite: str
    object: str
    cpu: str
    program: str
    prog_type: str
    ni_before: int
    ni_after: int
    loadable: bool
    status: str = ""  # "" when all went well, else why a figure is missing
    check: str = ""  # how it was checked ("run on generated inputs", "verified only: ...", "not checked")
    npi_before: int | None = None
    npi_after: int | None = None
    vtime_before_us: int | None = None
    vtime_after_us: int | None = None
    jited_before: int | None = None
    jited_after: int | None = None
    opt_seconds: float = 0.0
    rolled_back: list[str] = field(default_factory=list)  # "pass: reason"
    regressed: bool = False  # verified before, not after (must never happen)
    per_pass: dict[str, int] = field(default_factory=dict)  # slots saved by each pass alone

    @property
    def ni_pct(self) -> float:
        return 100.0 * (self.ni_before - self.ni_after) / self.ni_before if self.ni_before else 0.0

    @property
    def skipped(self) -> bool:
        """Not optimised (larger than ``--max-insns``)."""
        return self.status.startswith("skipped")


@dataclass
class SuiteSummary:
    suite: str
    programs: int
    loadable: int
    ni_before: int
    ni_after: int
    ni_avg_pct: float  # mean of per-program reductions (the paper's measure)
    npi_before: int
    npi_after: int
    npi_avg_pct: float | None
    vtime_avg_pct: float | None
    jited_before: int
    jited_after: int
    opt_seconds: float
    rolled_back: int
    regressed: int
    per_pass: dict[str, int]

    @property
    def ni_total_pct(self) -> float:
        return 100.0 * (self.ni_before - self.ni_after) / self.ni_before if self.ni_before else 0.0

    @property
    def s_per_kinsn(self) -> float:
        return self.opt_seconds / (self.ni_before / 1000) if self.ni_before else 0.0


def _pct(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before <= 0:
        return None
    return 100.0 * (before - after) / before


def summarise(rows: Sequence[ProgramRow], suite: str, passes: Sequence[str]) -> SuiteSummary:
    rows = [r for r in rows if not r.skipped]  # not optimised (--max-insns): in no total or average
    load = [r for r in rows if r.loadable and r.npi_before is not None and r.npi_after is not None]
    npi = [p for r in load if (p := _pct(r.npi_before, r.npi_after)) is not None]
    vt = [p for r in load if (p := _pct(r.vtime_before_us, r.vtime_after_us)) is not None]
    return SuiteSummary(
        suite, len(rows), len(load), sum(r.ni_before for r in rows), sum(r.ni_after for r in rows),
        statistics.fmean(r.ni_pct for r in rows) if rows else 0.0,
        sum(r.npi_before or 0 for r in load), sum(r.npi_after or 0 for r in load),
        statistics.fmean(npi) if npi else None, statistics.fmean(vt) if vt else None,
        sum(r.jited_before or 0 for r in load), sum(r.jited_after or 0 for r in load),
        sum(r.opt_seconds for r in rows), sum(len(r.rolled_back) for r in rows), sum(r.regressed for r in rows),
        {p: sum(r.per_pass.get(p, 0) for r in rows) for p in passes})


@dataclass
class OptReport:
    passes: list[str]
    checked: bool
    rows: list[ProgramRow]
    failures: list[dict[str, str]]  # objects that could not be read, corpus build failures
    seconds: float = 0.0
    # objects with code outside any program (.text functions no program calls, code no STT_FUNC covers): that
    # code is not optimised and in no total; their programs, if any, are measured as usual
    apart: list[dict[str, Any]] = field(default_factory=list)

    def suites(self) -> list[str]:
        return list(dict.fromkeys(r.suite for r in self.rows))

    def summaries(self) -> list[SuiteSummary]:
        out = [summarise([r for r in self.rows if r.suite == s], s, self.passes) for s in self.suites()]
        if len(out) > 1:
            out.append(summarise(self.rows, "all", self.passes))
        return out


# -- measuring ---------------------------------------------------------------------------------------------------
def _type_name(ps: ProgramSpec) -> str:
    from capsule.bpf.uapi import ProgType

    return ProgType(ps.type).label.lower()


def _best(stats: Sequence[Any]) -> Any:
    """Of several loads of the same program, the one with the least verification time (one is noisy)."""
    good = [s for s in stats if s is not None]
    return min(good, key=lambda s: s.verification_time_us or 0) if good else None


# local-storage maps must be declared with max_entries 0 (the kernel refuses anything else)
_STORAGE_MAPS = frozenset((MapType.SK_STORAGE, MapType.INODE_STORAGE, MapType.TASK_STORAGE, MapType.CGRP_STORAGE))


def as_loaded(spec: ObjectSpec) -> ObjectSpec:
    """What the application's user space does before loading: maps declared with ``max_entries`` 0 (sized at
    run time, e.g. per-CPU counters in xdp-tools, perf buffers in libbpf-tools) get the number of CPUs, as
    ``bpf_map__set_max_entries(libbpf_num_possible_cpus())`` or libbpf's perf buffer default would (local-storage
    maps excepted: 0 is their only valid size)."""
    sized = [k for k, m in spec.maps.items() if not m.max_entries and m.type not in _STORAGE_MAPS]
    if not sized:
        return spec
    n = possible_cpus()
    maps = {k: (replace(m, max_entries=n) if k in sized else m) for k, m in spec.maps.items()}
    return replace(spec, maps=maps)


def measure_object(spec: ObjectSpec, suite: str, obj: str, cpu: str, passes: Sequence[str], check: bool,
                   per_pass: bool = True, max_insns: int | None = None) -> list[ProgramRow]:
    """Optimise and measure every program of one object (one ``Checker`` for the object: its maps and BTF)."""
    from capsule.kernel.errors import BPFError, LoadError
    from capsule.opt.check import Checker
    from capsule.opt.pipeline import count_slots, make_passes, optimize_program

    rows: list[ProgramRow] = []
    spec = as_loaded(spec)
    checker = Checker(spec) if check else None
    try:
        for name, ps in spec.programs.items():
            row = ProgramRow(suite, obj, cpu, name, _type_name(ps), count_slots(ps), count_slots(ps), False,
                             check="not checked")
            if max_insns is not None and row.ni_before > max_insns:
                row.status = f"skipped: {row.ni_before} insns > --max-insns {max_insns}"
                row.check = "skipped"
                rows.append(row)
                continue
            rows.append(row)
            ref = None
            if checker is not None:
                try:
                    ref = checker.reference(name)
                    row.loadable, row.check = True, ref.note
                except (LoadError, BPFError, OSError) as e:
                    row.status = f"not loadable: {_short(e)}"
                    row.check = "not loadable: NI only"
                except Exception as e:  # the checker must not stop the benchmark; say what happened
                    row.status = f"checker error: {type(e).__name__}: {_short(e)}"
            try:
                res = optimize_program(ps, make_passes(passes), checker if ref is not None else None)
            except Exception as e:
                row.status = f"optimizer error: {type(e).__name__}: {_short(e)}"
                continue
            row.ni_after, row.opt_seconds = res.ni_after, res.seconds
            row.rolled_back = [f"{r.name}: {r.reason}" for r in res.rolled_back()]
            if ref is not None and checker is not None:
                _load_figures(row, checker, name, ps, res.optimized, ref.stats)
            if per_pass:
                for p in passes:
                    try:
                        alone = optimize_program(ps, make_passes([p]), None)
                        row.per_pass[p] = alone.ni_before - alone.ni_after
                    except Exception:
                        row.per_pass[p] = 0
    finally:
        if checker is not None:
            checker.close()
    return rows


def _load_figures(row: ProgramRow, checker: Any, name: str, original: ProgramSpec, optimized: ProgramSpec,
                  ref_stats: Any) -> None:
    """NPI, verification time and JITed size of both sides; a final optimised program that does not load is a
    regression (the checker accepted every step, so this re-checks the claim rather than assuming it)."""
    from capsule.kernel.errors import BPFError, LoadError

    def again(ps: ProgramSpec) -> Any:
        try:
            return checker.stats_of(name, ps)
        except (LoadError, BPFError, OSError):
            return None

    before = _best([ref_stats, again(original)])
    after = _best([again(optimized), again(optimized)])
    if after is None:
        row.regressed = True
        row.status = "REGRESSION: the optimised program does not load"
        return
    row.npi_before, row.npi_after = before.processed_insns, after.processed_insns
    row.vtime_before_us, row.vtime_after_us = before.verification_time_us, after.verification_time_us
    row.jited_before, row.jited_after = before.jited_size, after.jited_size


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:160]


def _own_sections(suite: str) -> dict[str, SectionType] | None:
    """Section names only the suite's own loader knows, typed as that loader types them (Suricata's ``filter``
    and ``loadbalancer`` are socket filters it attaches with ``SO_ATTACH_BPF``)."""
    from capsule.bpf.elf_sections import SectionType
    from capsule.bpf.uapi import ProgType

    if suite == "suricata":
        return {"filter": SectionType(ProgType.SOCKET_FILTER), "loadbalancer": SectionType(ProgType.SOCKET_FILTER)}
    return None


def run_bench(objects: Sequence[tuple[str, str, str, Path]], passes: Sequence[str], check: bool = True,
              limit: int | None = None, per_pass: bool = True, progress: Progress | None = None,
              max_insns: int | None = None) -> OptReport:
    """``objects``: (suite, name, cpu, path). ``limit``: at most that many objects per suite."""
    from capsule.bpf.elf import ObjectError, read_object

    t0 = time.perf_counter()
    report = OptReport(list(passes), check, [], [])
    taken: dict[str, int] = {}
    for suite, name, cpu, path in objects:
        if limit is not None and taken.get(suite, 0) >= limit:
            continue
        taken[suite] = taken.get(suite, 0) + 1
        try:
            spec = read_object(Path(path), section_types=_own_sections(suite))
        except (ObjectError, OSError) as e:
            report.failures.append({"suite": suite, "object": name, "cpu": cpu, "why": f"unreadable: {_short(e)}"})
            continue
        if progress:
            progress(f"{suite}/{cpu}/{name}: {len(spec.programs)} programs")
        unplaced = spec.unlinked.unplaced if spec.unlinked is not None else []
        if unplaced:
            report.apart.append({"suite": suite, "object": name, "cpu": cpu,
                                 "slots": sum(u.end - u.start for u in unplaced),
                                 "why": "; ".join(str(u) for u in unplaced)})
        report.rows += measure_object(spec, suite, name, cpu, passes, check, per_pass, max_insns)
    report.seconds = time.perf_counter() - t0
    return report


# -- output ------------------------------------------------------------------------------------------------------
def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render(report: OptReport, console: Any) -> None:
    """The per-suite table, the per-pass table, the paper beside ours, and the verdicts."""
    from rich.table import Table

    sums = report.summaries()
    t = Table(title=f"capsule bench opt: passes {','.join(report.passes)}"
                    f"{'' if report.checked else ' (not checked: NI only)'}")
    for col in ("suite", "progs", "loadable", "NI before", "NI after", "NI avg %", "NI total %", "NPI before",
                "NPI after", "NPI avg %", "vtime avg %", "jited before", "jited after", "opt s", "s/kinsn",
                "rolled back", "regressed"):
        t.add_column(col, justify="left" if col == "suite" else "right")
    for s in sums:
        t.add_row(s.suite, str(s.programs), str(s.loadable), f"{s.ni_before:,}", f"{s.ni_after:,}",
                  _f(s.ni_avg_pct), _f(s.ni_total_pct), f"{s.npi_before:,}", f"{s.npi_after:,}", _f(s.npi_avg_pct),
                  _f(s.vtime_avg_pct), f"{s.jited_before:,}", f"{s.jited_after:,}", _f(s.opt_seconds, "{:.2f}"),
                  _f(s.s_per_kinsn, "{:.4f}"), str(s.rolled_back), str(s.regressed))
    console.print(t)

    pt = Table(title="per-pass contribution (each pass alone): NI slots saved, % of NI before")
    pt.add_column("suite")
    for p in report.passes:
        pt.add_column(p, justify="right")
    for s in sums:
        pt.add_row(s.suite, *(f"{s.per_pass[p]:,} ({100.0 * s.per_pass[p] / s.ni_before if s.ni_before else 0:.2f}%)"
                              for p in report.passes))
    console.print(pt)

    allsum = sums[-1] if sums else None
    ct = Table(title="the paper (Merlin, ASPLOS 2024) beside ours")
    ct.add_column("measure")
    ct.add_column("paper", justify="right")
    ct.add_column("capsule", justify="right")
    by_suite = {s.suite: s for s in sums}
    for k, v in PAPER_NI.items():
        suite, how = OUR_COUNTERPART.get(k, ("", ""))
        ours = by_suite.get(suite)
        mine = ""
        if ours is not None and ours.programs:
            got = ours.ni_avg_pct if how == "avg" else max(r.ni_pct for r in _rows_of(report, suite) if not r.skipped)
            mine = f"{got:.1f}% ({suite}, {'avg per program' if how == 'avg' else 'max'})"
        ct.add_row(f"NI reduction, {k}", f"{v:.1f}%", mine)
    for s in sums:
        ct.add_row(f"NI reduction, {s.suite} (avg per program / max)", "",
                   f"{s.ni_avg_pct:.1f}% / "
                   f"{max((r.ni_pct for r in _rows_of(report, s.suite) if not r.skipped), default=0):.1f}%")
    if allsum is not None:
        ct.add_row("NPI reduction (avg per loadable program)", f"{PAPER_NPI:.1f}%", _f(allsum.npi_avg_pct, "{:.1f}%"))
        ct.add_row("verification time reduction (avg)", f"{PAPER_VTIME:.1f}%", _f(allsum.vtime_avg_pct, "{:.1f}%"))
        xdp = [r for r in report.rows if r.prog_type == "xdp"]
        ct.add_row("optimiser time per XDP program", f"{PAPER_SECONDS_PER_XDP_PROGRAM:.3f} s",
                   _f(statistics.fmean(r.opt_seconds for r in xdp) if xdp else None, "{:.3f} s"))
        ct.add_row("optimiser time per 1,000 insns (target < 0.05 s)", "",
                   _f(allsum.s_per_kinsn, "{:.4f} s"))
    console.print(ct)

    regressed = [r for r in report.rows if r.regressed]
    rolled = [(r, x) for r in report.rows for x in r.rolled_back]
    notload = [r for r in report.rows if not r.loadable and not r.skipped]
    skipped = [r for r in report.rows if r.skipped]
    errors = [r for r in report.rows if r.status.startswith(("optimizer error", "checker error"))]
    console.print(f"{len(report.rows)} programs in {len({(r.suite, r.object, r.cpu) for r in report.rows})} objects, "
                  f"{report.seconds:.1f} s; {len(notload)} not loadable (NI only); "
                  f"{len(skipped)} skipped (--max-insns); "
                  f"{len(report.failures)} objects not built or unreadable")
    console.print(f"verified before but not after: {len(regressed)}; pass results the checker rolled back "
                  f"(verifier refusal or behaviour difference, never shipped): {len(rolled)}; "
                  f"optimizer/checker errors: {len(errors)}")
    if report.apart:
        n = len(report.apart)
        console.print(f"{n} object{' holds' if n == 1 else 's hold'} code outside any program "
                      f"({sum(a['slots'] for a in report.apart):,} slots, not optimised, in no total)")
        for a in report.apart[:20]:
            console.print(f"  {a['suite']}/{a['cpu']}/{a['object']}: {a['why'][:150]}")
    for r, why in rolled[:20]:
        console.print(f"  rolled back {r.suite}/{r.cpu}/{r.object}:{r.program}: {why[:150]}")
    for r in (regressed + errors)[:20]:
        console.print(f"  {r.suite}/{r.cpu}/{r.object}:{r.program}: {r.status}")


def _rows_of(report: OptReport, suite: str) -> list[ProgramRow]:
    return report.rows if suite == "all" else [r for r in report.rows if r.suite == suite]


CSV_FIELDS = ("suite", "object", "cpu", "program", "prog_type", "loadable", "ni_before", "ni_after", "ni_pct",
              "npi_before", "npi_after", "vtime_before_us", "vtime_after_us", "jited_before", "jited_after",
              "opt_seconds", "check", "status", "rolled_back")


def write_csv(report: OptReport, path: Path) -> None:
    """One line per program, then one per pass-alone figure is in the ``pass:NAME`` columns."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*CSV_FIELDS, *(f"pass:{p}" for p in report.passes)])
        for r in report.rows:
            d = asdict(r)
            d["ni_pct"] = f"{r.ni_pct:.3f}"
            d["rolled_back"] = " | ".join(r.rolled_back)
            d["opt_seconds"] = f"{r.opt_seconds:.6f}"
            w.writerow([*("" if d[k] is None else d[k] for k in CSV_FIELDS),
                        *(r.per_pass.get(p, "") for p in report.passes)])


def plot(report: OptReport, path: Path) -> None:
    """Per suite: average NI/NPI/verification-time reduction beside the paper's, and each pass alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sums = report.summaries()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8))
    names = [s.suite for s in sums] + ["paper"]
    ni = [s.ni_avg_pct for s in sums] + [statistics.fmean(PAPER_NI.values())]
    npi = [s.npi_avg_pct or 0 for s in sums] + [PAPER_NPI]
    vt = [s.vtime_avg_pct or 0 for s in sums] + [PAPER_VTIME]
    xs = range(len(names))
    w = 0.27
    a1.bar([x - w for x in xs], ni, w, label="NI")
    a1.bar(list(xs), npi, w, label="NPI (loadable)")
    a1.bar([x + w for x in xs], vt, w, label="verification time")
    a1.set_xticks(list(xs), names, rotation=20)
    a1.set_ylabel("average reduction per program (%)")
    a1.set_title("reduction by suite (paper: mean of its NI suites)")
    a1.legend()
    a1.axhline(0, color="black", linewidth=0.5)
    for k, p in enumerate(report.passes):
        vals = [100.0 * s.per_pass[p] / s.ni_before if s.ni_before else 0 for s in sums]
        a2.bar([x + k * (0.8 / len(report.passes)) for x in range(len(sums))], vals, 0.8 / len(report.passes),
               label=p)
    a2.set_xticks([x + 0.4 - 0.4 / len(report.passes) for x in range(len(sums))], [s.suite for s in sums],
                  rotation=20)
    a2.set_ylabel("NI saved by the pass alone (% of NI)")
    a2.set_title("per-pass contribution")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- command line ------------------------------------------------------------------------------------------------
def add_parser(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``bench opt`` in the ``bench`` group (``capsule.cli.bench``)."""
    from capsule.opt.passes import DEFAULT_PASSES

    from .opt_corpus import SUITES

    p = bench.add_parser(
        "opt", help="the optimiser on a corpus of real BPF programs (NI, NPI, verification time, per pass)",
        description="Build (once, cached outside the repository) a corpus of real BPF programs from Debian "
                    "packages, optimise every program, prove each result in the kernel, and report instructions, "
                    "verifier processed instructions, verification time and JITed size before and after, per "
                    "suite and per pass, beside the Merlin paper's figures.")
    p.add_argument("--suite", action="append", choices=sorted(SUITES), help="only this suite (repeatable)")
    p.add_argument("--cpu", action="append", choices=["v2", "v3"], help="only objects built for this cpu")
    p.add_argument("--limit", type=int, help="at most N objects per suite")
    p.add_argument("--no-check", action="store_true", help="do not load or run anything: NI only")
    p.add_argument("--max-insns", type=int, default=DEFAULT_MAX_INSNS,
                   help=f"skip programs larger than this (default {DEFAULT_MAX_INSNS}; 0: no limit)")
    p.add_argument("--no-per-pass", action="store_true", help="skip the each-pass-alone runs")
    p.add_argument("--passes", default=",".join(DEFAULT_PASSES), help="comma-separated passes, in order")
    p.add_argument("--objects", nargs="+", metavar="OBJ", help="measure these object files (suite 'local') "
                   "instead of the corpus")
    p.add_argument("--jobs", type=int, help="parallel clang jobs for the corpus build (default: cores)")
    p.add_argument("--csv", metavar="PATH", help="write one line per program")
    p.add_argument("--plot", metavar="PATH", help="write a PNG chart")
    p.set_defaults(func=cmd_opt_bench)
    return p


def cmd_opt_bench(args: argparse.Namespace, console: Any = None) -> int:
    from rich.console import Console

    from .opt_corpus import build_corpus

    if console is None:
        console = Console() if sys.stdout.isatty() else Console(width=220)
    err = Console(stderr=True)
    progress: Progress = (lambda msg: err.log(msg)) if err.is_terminal else (lambda msg: None)
    passes = [x.strip() for x in args.passes.split(",") if x.strip()]
    failures: list[dict[str, str]] = []
    if args.objects:
        objects = [("local", Path(o).stem, "-", Path(o)) for o in args.objects]
    else:
        corpus = build_corpus(args.suite, jobs=args.jobs, progress=progress)
        objects = [(o.suite, o.name, o.cpu, Path(o.path)) for o in corpus.built(args.suite)
                   if not args.cpu or o.cpu in args.cpu or o.cpu == "debian"]
        failures = [{"suite": o.suite, "object": o.name, "cpu": o.cpu, "why": f"build: {o.reason}"}
                    for o in corpus.failed()]
        for suite, row in corpus.summary().items():
            console.print(f"corpus {suite}: {row['built']} objects built, {row['failed']} failed")
    from capsule.opt.pipeline import make_passes

    try:
        make_passes(passes)
    except ValueError as e:
        raise SystemExit(f"capsule bench opt: {e}") from None
    report = run_bench(objects, passes, check=not args.no_check, limit=args.limit,
                       per_pass=not args.no_per_pass, progress=progress, max_insns=args.max_insns or None)
    report.failures = failures + report.failures
    render(report, console)
    if args.csv:
        write_csv(report, Path(args.csv))
    if args.plot:
        plot(report, Path(args.plot))
    return 1 if any(r.regressed for r in report.rows) else 0
