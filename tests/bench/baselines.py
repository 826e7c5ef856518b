"""The exact figures of the benchmark programs, recomputed, and the file that records them (``baselines.json``).

A program's figures are, for each BPF program of its compiled object, the instructions capsule emitted, the
instructions the verifier processed and the bytes the JIT emitted, plus the region transitions of one run on a
small fixed input. They are kernel-independent (instructions, transitions) or depend only on the kernel's
verifier and JIT (processed, JITed bytes): the latter are compared only on the kernel release the file was
recorded on.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capsule.bench import integers, workloads
from capsule.bench.figures import ObjectFigures, object_figures
from capsule.bench.wasi_runs import run_kernel
from capsule.compiler import compile_module
from capsule.runtime import Instance
from capsule.wasm import load

FILE = Path(__file__).resolve().parent / "baselines.json"
#: figures the kernel's verifier and JIT decide: compared only on the release the baselines were recorded on
KERNEL_DEPENDENT = ("processed", "jited_bytes")
PER_PROGRAM = ("bpf_insns", "processed", "jited_bytes")
#: the figures that are not exact, with the relative difference allowed: Lua seeds its string hashes from
#: time(NULL) (lstate.c, luai_makeseed), so its tables, and the transitions of a run, vary by a few per million
TOLERANCE: dict[str, dict[str, float]] = {"lua": {"transitions": 1e-4}}


def kernel_release() -> str:
    """major.minor of the running kernel (what the verifier's and the JIT's output depend on)."""
    return ".".join(platform.release().split(".")[:2])


@dataclass
class Measured:
    """A program's figures (flat: ``"capsule_run.processed"``, ``"transitions"``) and its timings (printed)."""

    figures: dict[str, int]
    bpf_ms: float
    load_s: float


def _flat(figures: ObjectFigures) -> dict[str, int]:
    return {f"{p.name}.{key}": getattr(p, key) for p in figures.programs for key in PER_PROGRAM}


def measure_integer(name: str) -> Measured:
    """An integer kernel at its tiny size: one call of ``run(n)``."""
    from capsule.kernel.prog import bpf_stats

    spec = compile_module(load(integers.build_wasm(name)))
    with Instance(spec) as inst, bpf_stats():
        figures = _flat(object_figures(spec, inst))
        bpf0, tr0 = inst.run_time_ns(), inst.stats.transitions
        inst.call("run", integers.TINY[name])
        figures["transitions"] = inst.stats.transitions - tr0
        return Measured(figures, (inst.run_time_ns() - bpf0) / 1e6, inst.load_seconds)


def measure_workload(name: str) -> Measured:
    """A program of ``capsule.bench.workloads`` on its own input (the one ``capsule bench programs`` runs)."""
    (w,) = [w for w in workloads.WORKLOADS if w.name == name]
    spec = compile_module(load(Path(w.prepare().wasm()).read_bytes()))
    run = run_kernel(spec, w.invocation(w.scales[0]))
    figures = _flat(run.figures)
    figures["transitions"] = run.transitions
    return Measured(figures, run.bpf_ns / 1e6, run.figures.load_s)


def read() -> dict[str, Any]:
    try:
        return json.loads(FILE.read_text())
    except FileNotFoundError:
        return {"kernel": kernel_release(), "programs": {}}


def bless(name: str, figures: dict[str, int]) -> None:
    """Record ``figures`` as ``name``'s baseline (and this kernel as the file's), keeping every other entry."""
    data = read()
    data["kernel"] = kernel_release()
    data["programs"][name] = dict(sorted(figures.items()))
    data["programs"] = dict(sorted(data["programs"].items()))
    FILE.write_text(json.dumps(data, indent=1) + "\n")


def differences(name: str, figures: dict[str, int]) -> tuple[list[str], list[str]]:
    """What differs from ``name``'s baseline, and what was not compared (kernel-dependent figures on another
    kernel than the recorded one)."""
    data = read()
    base = data["programs"].get(name)
    if base is None:
        return [f"{name} has no baseline in {FILE.name}"], []
    same_kernel = data.get("kernel") == kernel_release()
    diffs, skipped = [], []
    for key in sorted(set(base) | set(figures)):
        if not same_kernel and key.endswith(KERNEL_DEPENDENT):
            skipped.append(key)
            continue
        old, new = base.get(key), figures.get(key)
        slack = TOLERANCE.get(name, {}).get(key, 0.0)
        if old != new and not (slack and old and new is not None and abs(new - old) <= slack * old):
            change = f" ({(new - old) / old:+.1%})" if isinstance(old, int) and isinstance(new, int) and old else ""
            diffs.append(f"{name} {key}: {old} -> {new}{change}")
    return diffs, skipped
