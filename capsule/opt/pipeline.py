"""Running passes over programs and objects, optionally proving each pass's result in the kernel.

``optimize_program`` applies passes one at a time. After each pass that changed something, the ``Checker``
(if given) loads the candidate and runs it against the original program's recorded behaviour; a candidate
that fails is dropped (the pass is rolled back for this program, the others keep their results) and the
failure is recorded. The pipeline repeats while a round still improves the program (passes enable each
other: merging leaves dead code, folding exposes merges).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from capsule.bpf.spec import ObjectSpec, ProgramSpec

from .analysis import Analysis
from .check import NPI_REFUSED
from .maprefs import keep_map_refs
from .passes import DEFAULT_PASSES, PASSES, Pass
from .rewrite import Code
from .rewrite import count_slots as _count

__all__ = ["PassRecord", "ProgramResult", "ObjectResult", "optimize_program", "optimize_object", "make_passes",
           "CodeOutsideProgramsError", "refuse_code_outside_programs", "count_slots"]


def count_slots(ps: ProgramSpec) -> int:
    """NI: instruction slots, as the kernel counts them (``ld_imm64`` is two)."""
    return _count(ps.insns)


@dataclass
class PassRecord:
    name: str
    round: int
    rewrites: int
    before: int  # slots
    after: int
    accepted: bool
    reason: str = ""  # why the checker refused it
    seconds: float = 0.0  # time the pass took (not checking)

    @property
    def npi_refused(self) -> bool:
        """Refused only because it would raise the verifier's processed instructions."""
        return not self.accepted and self.reason.startswith(NPI_REFUSED)


@dataclass
class ProgramResult:
    name: str
    original: ProgramSpec
    optimized: ProgramSpec
    records: list[PassRecord] = field(default_factory=list)
    seconds: float = 0.0  # time spent in the passes (not checking)
    check_note: str = ""  # how the program was checked (e.g. "verified only: tracepoint")
    before_stats: dict[str, int | None] | None = None  # verifier/JIT figures, when checked
    after_stats: dict[str, int | None] | None = None

    @property
    def ni_before(self) -> int:
        return count_slots(self.original)

    @property
    def ni_after(self) -> int:
        return count_slots(self.optimized)

    def rolled_back(self) -> list[PassRecord]:
        """Every refused pass result (failed proofs and NPI refusals)."""
        return [r for r in self.records if not r.accepted]

    def failed(self) -> list[PassRecord]:
        """Pass results the kernel refused or that behaved differently (bugs), not NPI refusals."""
        return [r for r in self.records if not r.accepted and not r.npi_refused]

    def npi_refused(self) -> list[PassRecord]:
        """Pass results skipped because the verifier would have processed more instructions."""
        return [r for r in self.records if r.npi_refused]

    def saved_by_pass(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            if r.accepted:
                out[r.name] = out.get(r.name, 0) + r.before - r.after
        return out


@dataclass
class ObjectResult:
    spec: ObjectSpec  # the optimised object
    programs: dict[str, ProgramResult]


# a checker: (program name, candidate) -> None when accepted, else the reason it was refused
CheckFn = Callable[[str, ProgramSpec], "str | None"]


def make_passes(names: Sequence[str] | None = None, extra: dict[str, Pass] | None = None) -> list[Pass]:
    """Pass instances by name (default: every pass, in pipeline order). ``extra`` adds passes (tests)."""
    chosen = list(names) if names is not None else list(DEFAULT_PASSES)
    out: list[Pass] = []
    for n in chosen:
        if extra and n in extra:
            out.append(extra[n])
        elif n in PASSES:
            out.append(PASSES[n]())
        else:
            raise ValueError(f"unknown pass {n!r} (known: {', '.join(PASSES)})")
    return out


def optimize_program(ps: ProgramSpec, passes: Sequence[Pass], check: CheckFn | None = None,
                     max_rounds: int = 3) -> ProgramResult:
    # The analyses allocate hundreds of thousands of small tuples, each of which counts towards the cyclic
    # collector's next run, which then walks every young object: about a tenth of the optimizer's time, for
    # nothing, since the optimizer makes no reference cycles (tests/opt/test_speed.py checks it) and reference
    # counting frees all it drops. So the collector rests while a program is optimised.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _optimize_program(ps, passes, check, max_rounds)
    finally:
        Analysis.forget()
        if was_enabled:
            gc.enable()


def _optimize_program(ps: ProgramSpec, passes: Sequence[Pass], check: CheckFn | None, max_rounds: int
                      ) -> ProgramResult:
    res = ProgramResult(ps.name, ps, ps)
    current = ps
    code = Code.from_program(ps)
    spent = 0.0
    # pass index -> a code that pass is known to leave unchanged (its last run ended there finding nothing,
    # ``Pass.settled_on``). Passes are deterministic, so running one again on that same code would find
    # nothing: it is skipped.
    settled: dict[int, Code] = {}
    for rnd in range(max_rounds):
        improved = False
        for k, p in enumerate(passes):
            if settled.get(k) is code:
                continue
            t0 = time.perf_counter()
            new_code, n = p.run(code, ps.type)
            fixed = getattr(p, "settled_on", None)
            if fixed is not None:
                p.settled_on = None  # the pass keeps no code alive
            kept = keep_map_refs(code, new_code) if n else new_code
            if fixed is new_code and kept is new_code:
                settled[k] = new_code
            new_code = kept
            candidate = new_code.to_program(current) if n else current
            dt = time.perf_counter() - t0
            spent += dt
            if not n:
                continue
            before, after = count_slots(current), count_slots(candidate)
            reason = check(ps.name, candidate) if check is not None else None
            rec = PassRecord(p.name, rnd, n, before, after, reason is None, reason or "", dt)
            res.records.append(rec)
            if reason is None:
                current, code = candidate, new_code
                improved = improved or after < before
        if not improved:
            break
    res.optimized = current
    res.seconds = spent
    return res


class CodeOutsideProgramsError(ValueError):
    """The object holds code no program holds: the optimised object would silently lack it."""


def refuse_code_outside_programs(spec: ObjectSpec) -> None:
    """Raise ``CodeOutsideProgramsError`` naming the code of an object read from ELF that no program holds
    (``UnlinkedCode.unplaced``): what the optimizer does not hold as a program it must not drop."""
    lost = spec.unlinked.unplaced if spec.unlinked is not None else []
    if lost:
        listed = "; ".join(str(u) for u in lost[:4]) + (f"; and {len(lost) - 4} more" if len(lost) > 4 else "")
        raise CodeOutsideProgramsError(
            f"code outside any program ({listed}): capsule opt rewrites programs and what they call, so the "
            "output would lack it; nothing written")


def optimize_object(spec: ObjectSpec, passes: Sequence[Pass], check: CheckFn | None = None,
                    programs: Sequence[str] | None = None) -> ObjectResult:
    """Optimise every program (or the named ones); returns a new ``ObjectSpec`` and per-program results.

    The result holds the programs and what they call, nothing else; so an object with code no program holds
    is refused (``refuse_code_outside_programs``) rather than returned without that code."""
    refuse_code_outside_programs(spec)
    out = replace(spec, programs=dict(spec.programs), unlinked=None)  # the code as read no longer describes it
    results: dict[str, ProgramResult] = {}
    for name, ps in spec.programs.items():
        if programs is not None and name not in programs:
            continue
        r = optimize_program(ps, passes, check)
        results[name] = r
        out.programs[name] = r.optimized
    return ObjectResult(out, results)
