"""Feature probes and kernel profiles: on the running kernel the probes answer what
../shared/design/KERNEL-FACTS.md measured, and the profile picked is the one that kernel should get.

The same file runs inside the VMs of ``capsule.testing.vm`` (Debian's 6.1 and 6.12), so each
known kernel's facts are checked on that kernel itself."""

from __future__ import annotations

import json
import os
import re

import pytest

from capsule.kernel import probe as probes
from capsule.kernel.probe import PROBES, ProbeResult, probe, probe_all
from capsule.kernel.profiles import MAP_PIECE, PROFILES, NoProfile, best_profile, profile

EVERYTHING = {p.name for p in PROBES}
# gotol is there: Debian's 6.1.192 verifier follows a JMP32 JA's 32-bit offset and runs it right (measured)
NOT_ON_6_1 = {"cpu_v4", "may_goto", "arena", "arena_atomics", "arena_alloc_pages", "kfuncs"}
# what each kernel the project runs on can do, as measured (host: 6.18; VMs: Debian 12's 6.1 and 6.12)
FACTS: dict[str, tuple[set[str], str]] = {
    "6.18": (EVERYTHING, "arena-v4"),
    "6.12": (EVERYTHING, "arena-v4"),
    "6.1": (EVERYTHING - NOT_ON_6_1, "map-v3"),
}
REASONS_ON_6_1 = {"may_goto": "unknown opcode e5", "arena": "EINVAL", "cpu_v4": "EINVAL"}


def running() -> str:
    m = re.match(r"(\d+\.\d+)", os.uname().release)
    return m.group(1) if m else os.uname().release


@pytest.mark.requires_bpf
def test_each_probe_closes_what_it_opens_and_explains_a_no() -> None:
    probe.cache_clear()  # really run them, under this directory's fd-leak check
    results = probe_all()
    assert list(results) == [p.name for p in PROBES]
    for r in results.values():
        assert isinstance(r, ProbeResult)
        if not r.ok:
            assert r.detail, f"{r.name} says no without a reason"


@pytest.mark.requires_bpf
def test_probes_report_what_kernel_facts_says() -> None:
    version = running()
    if version not in FACTS:
        pytest.skip(f"no measured facts for Linux {version} (known: {', '.join(FACTS)})")
    yes, picked = FACTS[version]
    results = probe_all()
    assert {n for n, r in results.items() if r.ok} == yes
    assert best_profile(results).name == picked
    if version == "6.1":
        for name, reason in REASONS_ON_6_1.items():
            assert reason in results[name].detail
    assert results["array_value_max"].value >= MAP_PIECE
    assert probe("bpf_loop") is results["bpf_loop"]  # cached: the second answer is the first


def answers(yes: set[str], value_max: int = 256 << 20) -> dict[str, ProbeResult]:
    return {n: ProbeResult(n, n in yes, "" if n in yes else "EINVAL: no", value_max if n == "array_value_max" else None)
            for n in EVERYTHING}


def test_best_profile_is_the_richest_that_fits() -> None:
    assert best_profile(answers(EVERYTHING)).name == "arena-v4"
    assert best_profile(answers(EVERYTHING - NOT_ON_6_1)).name == "map-v3"
    on_6_8 = EVERYTHING - {"may_goto", "arena", "arena_atomics", "arena_alloc_pages"}  # cpu v4, no arena
    assert best_profile(answers(on_6_8)).name == "map-v4"
    arena_without_atomics = EVERYTHING - {"arena_atomics"}
    assert best_profile(answers(arena_without_atomics)).name == "map-v4"


def test_no_profile_names_what_is_missing() -> None:
    with pytest.raises(NoProfile, match="map-v3 needs global_funcs"):
        best_profile(answers(EVERYTHING - {"global_funcs"}))
    with pytest.raises(NoProfile, match="array_value_max"):  # pieces of 4 MiB do not fit
        best_profile(answers(EVERYTHING - {"arena"}, value_max=1 << 20))
    with pytest.raises(NoProfile, match="known: arena-v4, map-v4, map-v3"):
        profile("arena-v5")


def test_profiles_need_only_probes_that_exist() -> None:
    for p in PROFILES:
        assert set(p.needs()) <= EVERYTHING, p.name
        assert p.missing(answers(EVERYTHING)) == []
    assert "may_goto" not in profile("map-v3").needs() and "cpu_v4" not in profile("map-v3").needs()
    assert {"arena", "may_goto", "cpu_v4", "gotol"} <= set(profile("arena-v4").needs())


@pytest.mark.requires_bpf
def test_a_probe_that_fails_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> str:
        from capsule.bpf.asm import exit_
        from capsule.kernel import Program, ProgType

        Program.load(ProgType.SOCKET_FILTER, [exit_()])  # r0 never set: the verifier refuses
        return ""

    monkeypatch.setitem(probes.BY_NAME, "socket_filter", probes.Probe("socket_filter", "t", "0", refused))
    probe.cache_clear()
    try:
        r = probe("socket_filter")
    finally:
        probe.cache_clear()
    assert not r.ok and r.detail.startswith("EACCES: ") and "R0" in r.detail


@pytest.mark.requires_bpf
def test_capsule_probe_command(capsys: pytest.CaptureFixture[str]) -> None:
    from capsule.cli import main

    version = running()
    assert main(["probe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernel"] == os.uname().release and len(doc["probes"]) == len(PROBES)
    assert main(["probe"]) == 0
    text = capsys.readouterr().out
    assert "BPF features of Linux" in text and "may_goto" in text
    if version in FACTS:
        assert doc["profile"] == FACTS[version][1]
        assert f"profile: {FACTS[version][1]}" in text
