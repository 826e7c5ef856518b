"""``Row``: one program's line of ``capsule bench programs`` (measured by ``capsule.bench.programs``, shown by
``capsule.bench.programs_report``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .figures import ObjectFigures


@dataclass
class Row:
    """One program's line of the table. Times are in ms per ``unit``, one entry per repetition."""

    name: str
    what: str
    unit: str = "run"
    status: str = "ok"  # "ok", "missing" (no recipe), "failed" (a build, load or run did not succeed)
    note: str = ""
    native_ms: list[float] = field(default_factory=list)
    wasmtime_ms: list[float] = field(default_factory=list)
    kernel_ms: list[float] = field(default_factory=list)  # BPF run time
    kernel_wall_ms: list[float] = field(default_factory=list)
    transitions: int | None = None  # region transitions of one kernel run
    figures: ObjectFigures | None = None
    wasm_bytes: int | None = None
    build_cold_s: float | None = None  # C to wasm to BPF with empty build caches
    build_warm_s: float | None = None
    compile_s: float | None = None  # wasm to BPF alone (warm)
    kernel_agrees: bool | None = None
    wasmtime_agrees: bool | None = None
    article: float | None = None
    target: float | None = None

    @staticmethod
    def best(xs: list[float]) -> float | None:
        return min(xs) if xs else None

    def ratio(self, xs: list[float]) -> float | None:
        a, b = self.best(xs), self.best(self.native_ms)
        return a / b if a is not None and b else None

    @property
    def counts(self) -> bool:
        """The kernel ran and said what the native build said: its ratio may be compared with anything."""
        return self.status == "ok" and bool(self.kernel_agrees) and bool(self.kernel_ms)

    @property
    def meets_target(self) -> bool | None:
        r = self.ratio(self.kernel_ms)
        return None if r is None or self.target is None or not self.counts else r <= self.target

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["figures"] = self.figures.to_json() if self.figures else None
        d.update(counts=self.counts, meets_target=self.meets_target, kernel_over_native=self.ratio(self.kernel_ms),
                 kernel_wall_over_native=self.ratio(self.kernel_wall_ms),
                 wasmtime_over_native=self.ratio(self.wasmtime_ms))
        return d
