"""The default builds of Lua and zlib load, every BPF program of them within the verifier's 1M processed
instructions (the kernel's hard limit per program load). A code-generation change that makes either stop
loading, or that a split into more programs only just hides, fails here with the per-program figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsule.bench.figures import object_figures
from capsule.bench.workloads import WORKLOADS
from capsule.compiler import compile_module
from capsule.runtime import Instance
from capsule.wasm import load
from tests.fds import bpf_fd_count

LIMIT = 1_000_000  # processed instructions per program load (KERNEL-FACTS.md)


@pytest.mark.requires_bpf
@pytest.mark.parametrize("name", ["lua", "zlib-example"])
def test_default_build_loads_within_the_verifier_limit(name: str) -> None:
    (w,) = [w for w in WORKLOADS if w.name == name]
    spec = compile_module(load(Path(w.prepare().wasm()).read_bytes()))  # default Options
    before = bpf_fd_count()
    with Instance(spec) as inst:
        figures = object_figures(spec, inst)
    assert bpf_fd_count() == before
    print(f"\n{name}: loaded in {figures.load_s:.1f} s; " + ", ".join(
        f"{p.name} {p.bpf_insns:,} insns, {p.processed:,} processed ({p.processed / LIMIT:.0%} of the limit)"
        for p in figures.programs))
    over = [p.name for p in figures.programs if p.processed > LIMIT]
    assert not over, f"{name}: {', '.join(over)} processed more than {LIMIT:,} instructions"
