"""A program compiled by capsule, loaded on the running kernel: it runs where the kernel has what its build
uses, and is refused before any map or verifier where it does not, with a message that names the missing
feature and the profile to build for. On the host (6.18) and 6.12 the first holds; on Debian's 6.1 (in the
VM, ``capsule.testing.vm``) the second, until the map window lands."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from capsule.kernel.preflight import MissingFeature
from capsule.kernel.probe import probe
from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.testing.engines import open_guest
from capsule.toolchain.guest import build_wasm

PROGRAM = Path(__file__).parents[1] / "programs" / "strings.c"


@pytest.mark.requires_bpf
def test_arena_build_runs_or_is_refused_naming_what_is_missing() -> None:
    wasm = build_wasm([PROGRAM], ["-O2"]).wasm
    if probe("arena").ok and probe("may_goto").ok and probe("cpu_v4").ok:
        out = io.BytesIO()
        g = open_guest(wasm, "kernel")
        try:
            code = WasiHost(g, WasiConfig(args=["strings"], stdout=out, stderr=io.BytesIO())).run()
        finally:
            g.close()
        assert code == 0 and b"strerror ok" in out.getvalue()
        return
    try:
        g = open_guest(wasm, "kernel")
    except MissingFeature as e:
        text = str(e)
        assert "lacks BPF_MAP_TYPE_ARENA" in text and "map 'capsule_window'" in text
        assert "--profile map-v3" in text
        assert "\n" not in text  # one line, as the CLI prints it
        assert e.profile == "map-v3" and "arena" in e.missing
    else:
        g.close()
        raise AssertionError("an arena build loaded on a kernel whose probe says it has no arena")
