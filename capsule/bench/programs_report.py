"""The table and the plot of ``capsule bench programs`` (``capsule.bench.programs`` measures the rows)."""

from __future__ import annotations

from pathlib import Path

from .program_rows import Row

COLUMNS = ("program", "native ms", "wasmtime ms", "kernel ms (BPF)", "kernel wall ms", "wasmtime/native",
           "kernel/native", "target", "article", "BPF insns", "programs", "processed (per program)", "load s",
           "build cold s", "build warm s", "agree")


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:,.3f}" if x < 1 else f"{x:,.1f}"


def _x(r: float | None) -> str:
    return "" if r is None else f"{r:.2f}x"


def _s(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


def _agree(r: Row) -> str:
    if r.status == "missing":
        return ""
    if r.status == "failed":
        return f"FAILED: {r.note}"
    if r.kernel_agrees:
        return "yes" + (f" ({r.note})" if r.note else "")
    return f"NO: {r.note}"


def _target(r: Row) -> str:
    if r.target is None:
        return ""
    met = r.meets_target
    return f"{r.target:g}x" + ("" if met is None else " met" if met else " missed")


def render_table(rows: list[Row]) -> str:
    """A Markdown table: the best time of the repetitions, ratios to native, the verifier's and build figures."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        name = r.name if r.unit == "run" else f"{r.name} (per {r.unit})"
        if r.status == "missing":
            lines.append(f"| {name} | {r.note} |" + " |" * (len(COLUMNS) - 2))
            continue
        f = r.figures
        per = " + ".join(f"{p.processed:,}" for p in f.programs) if f else ""
        cells = [name, _ms(r.best(r.native_ms)), _ms(r.best(r.wasmtime_ms)), _ms(r.best(r.kernel_ms)),
                 _ms(r.best(r.kernel_wall_ms)), _x(r.ratio(r.wasmtime_ms)),
                 _x(r.ratio(r.kernel_ms)) if r.counts else (f"({_x(r.ratio(r.kernel_ms))})" if r.kernel_ms else ""),
                 _target(r), "" if r.article is None else f"{r.article:g}x",
                 f"{f.bpf_insns:,}" if f else "", str(len(f.programs)) if f else "",
                 (f"{f.processed:,}" + (f" ({per})" if len(f.programs) > 1 else "")) if f else "",
                 f"{f.load_s:.1f}" if f else "", _s(r.build_cold_s), _s(r.build_warm_s), _agree(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_rows(rows: list[Row], path: Path) -> None:
    """Bars of kernel/native (BPF run time) and wasmtime/native per program, with the targets and the article's
    ratios as markers, on a log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.ratio(r.kernel_ms) is not None or r.ratio(r.wasmtime_ms) is not None]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(shown) + 1.8))
    ys = list(range(len(shown)))
    h = 0.38
    ax.barh([y - h / 2 for y in ys], [r.ratio(r.kernel_ms) or 0 for r in shown], h,
            label="kernel (BPF run time) / native", color=["C0" if r.counts else "C3" for r in shown])
    ax.barh([y + h / 2 for y in ys], [r.ratio(r.wasmtime_ms) or 0 for r in shown], h, label="wasmtime / native",
            color="C2")
    tx = [(y, r.target) for y, r in zip(ys, shown, strict=True) if r.target is not None]
    ax.scatter([t for _, t in tx], [y for y, _ in tx], marker="|", s=300, color="k", label="target (issue 13)")
    ar = [(y, r.article) for y, r in zip(ys, shown, strict=True) if r.article is not None]
    ax.scatter([a for _, a in ar], [y for y, _ in ar], marker="D", color="C1", label="BPF Capsule article")
    ax.set_yticks(ys, [r.name if r.counts or not r.kernel_ms else f"{r.name} (outputs differ)" for r in shown])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("time / native time (log scale)")
    ax.set_title("capsule bench programs")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
