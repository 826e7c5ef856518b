"""``capsule bench loops --scaling``: verification cost and run time against ``n`` and against body size.

Every point loads a fresh program (a constant bound is part of the code) and runs it, so each mechanism meets
its limit for real: the verifier's 1M processed-instruction budget for loops whose bound it knows, the 2^23
iteration cap of ``bpf_loop`` and ``bpf_iter_num`` (-E2BIG), ``may_goto``'s time cut (about 250 ms on this
kernel), the dispatcher's per-invocation budget (continued from the host). Each point's outcome is a status
(``ok``, ``rejected: ...``, ``E2BIG: ...``, ``cut by may_goto after K iterations``), never a wrong sum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .loop_programs import DISPATCH_BUDGET, MECHANISMS, generate
from .loop_runner import MAX_INVOCATIONS, Loaded, LoopBench, Rejected, repeat_for, safe_load, verdict

SCALING_NS: tuple[int, ...] = (10, 1_000, 100_000, 1_000_000, 1 << 23, (1 << 23) + 1, 1 << 30)
SCALING_BODIES: tuple[int, ...] = (1, 4, 16, 64)
BODY_N = 10_000
INSN_LIMIT = 1_000_000

Progress = Callable[[str], None]


def _best_times(bench: LoopBench, loaded: Loaded, repeat: int, samples: int) -> tuple[float, float, Any]:
    """The fastest of ``samples`` measurements (other work on the machine only ever adds time)."""
    runs = [bench.run(loaded, repeat) for _ in range(samples)]
    return min(r.duration_ns for r in runs), min(r.ktime_ns for r in runs), runs[-1]


def _point(bench: LoopBench, mech: str, n: int, body: int, baseline: dict[tuple[str, int], tuple[float, float]],
           ) -> dict[str, Any]:
    point: dict[str, Any] = {"n": n, "body": body}
    if mech == "dispatcher" and n // DISPATCH_BUDGET > MAX_INVOCATIONS:
        point.update(status=f"not run: needs {n // DISPATCH_BUDGET:,} host invocations", ok=True,
                     complete=False)
        return point
    lp = generate(mech, n, body)
    loaded = safe_load(bench, lp)
    if isinstance(loaded, Rejected):
        point.update(status=loaded.status, ok=True, complete=False, processed_insns=loaded.processed_insns,
                     load_ms=loaded.load_ms)
        return point
    try:
        point.update(processed_insns=loaded.processed_insns, verify_us=loaded.verify_us, load_ms=loaded.load_ms)
        repeat = repeat_for(n, 1_000_000, 100)
        samples = 3 if n <= 100_000 else 1
        dur, kt, last = _best_times(bench, loaded, repeat, samples)
        v = verdict(lp, last)
        point.update(status=v.text, ok=v.ok, complete=v.complete, iterations=last.iterations,
                     invocations=last.invocations, run_ns=dur)
        if v.complete and n > 0:
            d0, k0 = baseline[(mech, body)]
            point.update(ns_per_iter=(dur - d0) / n, ktime_ns_per_iter=(kt - k0) / n)
        elif last.iterations:
            point.update(ns_per_iter=dur / last.iterations)  # a cut loop: no baseline, the whole run
    finally:
        loaded.close()
    return point


def _baseline(bench: LoopBench, mech: str, body: int) -> tuple[float, float]:
    empty = safe_load(bench, generate(mech, 0, body))
    if isinstance(empty, Rejected):
        return 0.0, 0.0
    try:
        d, k, _ = _best_times(bench, empty, 100, 3)
        return d, k
    finally:
        empty.close()


def _limit(points: list[dict[str, Any]]) -> str:
    """Where a mechanism stopped, in words, from its points against n."""
    last_ok = None
    for p in points:
        if p.get("complete"):
            last_ok = p
            continue
        if p["status"].startswith("not run"):
            done = f"complete at every n up to {last_ok['n']:,}" if last_ok else "nothing completed"
            return f"no limit met: {done}; {p['status']} at n = {p['n']:,}"
        text = f"{p['status']} at n = {p['n']:,}"
        if last_ok is not None:
            text += f" (complete at n = {last_ok['n']:,})"
        per = _insns_per_iteration(points)
        if per and p["status"].startswith("rejected"):
            text += f"; {per:.1f} processed insns per iteration, so n <= ~{int(INSN_LIMIT / per):,}"
        return text
    return f"complete at every n up to {points[-1]['n']:,}" if points else ""


def _insns_per_iteration(points: list[dict[str, Any]]) -> float | None:
    """The verifier's cost per iteration, from the largest completed point (None when it does not grow)."""
    done = [p for p in points if p.get("complete") and p.get("processed_insns") and p["n"] >= 1000]
    if len(done) < 1:
        return None
    p = done[-1]
    first = points[0].get("processed_insns") or 0
    per = (p["processed_insns"] - first) / (p["n"] - points[0]["n"])
    return per if per > 0.5 else None


def run_scaling(ns: Sequence[int] = SCALING_NS, bodies: Sequence[int] = SCALING_BODIES, *, body_n: int = BODY_N,
                mechanisms: Sequence[str] | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Measure every generated mechanism at each ``n`` (body 1) and each body size (at ``body_n``).

    The compiled wasm rows are left out: their bound is the call's argument, so their verification cost does
    not depend on ``n`` (the tests show it), and their body is the compiler's, not a knob."""
    say = progress or (lambda _msg: None)
    keys = [m.key for m in MECHANISMS if m.available and not m.compiled and (mechanisms is None or m.key in mechanisms)]
    out: dict[str, Any] = {"n_points": list(ns), "body_points": list(bodies), "body_n": body_n,
                           "dispatch_budget": DISPATCH_BUDGET, "vs_n": {}, "vs_body": {}, "limits": {}}
    with LoopBench() as bench:
        baseline = {(k, b): _baseline(bench, k, b) for k in keys for b in sorted({1, *bodies})}
        for k in keys:
            say(f"scaling {k} against n")
            out["vs_n"][k] = [_point(bench, k, n, 1, baseline) for n in ns]
            say(f"scaling {k} against body size")
            out["vs_body"][k] = [_point(bench, k, body_n, b, baseline) for b in bodies]
            out["limits"][k] = _limit(out["vs_n"][k])
    return out


def render_scaling(scaling: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    for axis, label in (("vs_n", "n"), ("vs_body", "body")):
        pts = scaling["n_points"] if axis == "vs_n" else scaling["body_points"]
        title = ("scaling against n (body 1)" if axis == "vs_n"
                 else f"scaling against body size (updates per iteration, n = {scaling['body_n']:,})")
        table = Table(title=title + ": processed insns / ns per iteration (test_run) / status")
        table.add_column("mechanism")
        for v in pts:
            table.add_column(f"{label}={v:,}", justify="right")
        for k, points in scaling[axis].items():
            cells = []
            for p in points:
                bits = [f"{p['processed_insns']:,} insns" if p.get("processed_insns") else "",
                        f"{p['ns_per_iter']:.2f} ns" if p.get("ns_per_iter") is not None else "",
                        "" if p["status"] == "ok" else p["status"]]
                cells.append("\n".join(b for b in bits if b))
            table.add_row(k, *cells)
        console.print(table)
    console.print("where each mechanism stops:", highlight=False)
    for k, text in scaling["limits"].items():
        console.print(f"  {k}: {text}", highlight=False)


def plot_scaling(scaling: dict[str, Any], path: Path) -> None:
    """Four panels: processed insns and ns/iteration, against n and against body size (log scales)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for col, (axis, xlabel) in enumerate((("vs_n", "n (iterations)"), ("vs_body", "body (updates/iteration)"))):
        for k, points in scaling[axis].items():
            x = "n" if axis == "vs_n" else "body"
            ok = [p for p in points if p.get("complete")]
            line = axes[0][col].plot([p[x] for p in ok], [p["processed_insns"] for p in ok], "o-", label=k)[0]
            rej = [p for p in points if p["status"].startswith("rejected")]
            if rej:
                axes[0][col].plot([p[x] for p in rej], [p.get("processed_insns") or 1e6 for p in rej], "x",
                                  color=line.get_color(), markersize=10)
            timed = [p for p in ok if p.get("ns_per_iter") is not None and p["ns_per_iter"] > 0]
            axes[1][col].plot([p[x] for p in timed], [p["ns_per_iter"] for p in timed], "o-", label=k,
                              color=line.get_color())
        axes[0][col].axhline(1_000_000, color="grey", linestyle="--", linewidth=1)
        axes[0][col].set_ylabel("verifier processed insns (x = rejected)")
        axes[1][col].set_ylabel("ns per iteration (test_run)")
        for row in (0, 1):
            axes[row][col].set_xscale("log")
            axes[row][col].set_yscale("log")
            axes[row][col].set_xlabel(xlabel)
            axes[row][col].grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("BPF loop mechanisms: verification cost and run time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
