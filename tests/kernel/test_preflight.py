"""What an object needs from the kernel, and the clear refusal when the kernel lacks it (before any map is
created or any program verified). The kernel's answers are faked here to be Debian 12's 6.1, as measured in
the VM; ``tests/testing/test_refusal.py`` sees the real refusal on the real 6.1."""

from __future__ import annotations

from dataclasses import replace

import pytest

from capsule.bpf.asm import R0, R1, addr_space_cast, exit_, gotol, ldxs, may_goto, mov, movsx, sdiv
from capsule.bpf.spec import MapSpec, ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapFlags, MapType, ProgType
from capsule.kernel import preflight
from capsule.kernel.collection import Collection
from capsule.kernel.errors import LoadError
from capsule.kernel.preflight import MissingFeature, check_object, insn_feature, object_needs
from capsule.kernel.probe import PROBES, ProbeResult
from capsule.kernel.profiles import PROFILE_SECTION

ON_6_1_NO = {"cpu_v4", "may_goto", "arena", "arena_atomics", "arena_alloc_pages", "kfuncs"}


def arena_object() -> ObjectSpec:
    prog = ProgramSpec("capsule_run", "xdp", ProgType.XDP,
                       [mov(R0, 0), may_goto(1), sdiv(R0, 3), exit_()])
    window = MapSpec(name="capsule_window", type=MapType.ARENA, key_size=0, value_size=0, max_entries=16,
                     flags=int(MapFlags.MMAPABLE))
    return ObjectSpec(maps={"capsule_window": window}, programs={"capsule_run": prog})


def fake_kernel(monkeypatch: pytest.MonkeyPatch, lacks: set[str]) -> None:
    """Make the preflight see a kernel lacking ``lacks`` (the probes' answers, faked)."""
    results = {p.name: ProbeResult(p.name, p.name not in lacks, "" if p.name not in lacks else
                                   ("EINVAL: unknown opcode e5" if p.name == "may_goto" else "EINVAL: creating"),
                                   256 << 20 if p.name == "array_value_max" else None) for p in PROBES}
    monkeypatch.setattr(preflight, "probe", results.__getitem__)
    monkeypatch.setattr(preflight, "probe_all", lambda: results)


def fake_6_1(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_kernel(monkeypatch, ON_6_1_NO)


def test_instructions_name_their_feature() -> None:
    assert insn_feature(may_goto(0)) == "may_goto"
    assert insn_feature(gotol(0)) == "gotol"
    assert insn_feature(sdiv(R0, 3)) == "cpu_v4"
    assert insn_feature(movsx(R0, R1, 8)) == "cpu_v4"
    assert insn_feature(ldxs(1, R0, R1, 0)) == "cpu_v4"
    assert insn_feature(addr_space_cast(R0, R0, 0, 1)) == "arena"
    assert insn_feature(mov(R0, R1)) is None


def test_object_needs_says_where() -> None:
    needs = object_needs(arena_object())
    assert needs == {"arena": "map 'capsule_window' (ARENA)", "may_goto": "program 'capsule_run', insn 1",
                     "cpu_v4": "program 'capsule_run', insn 2"}


def test_arena_build_on_6_1_is_refused_naming_the_feature_and_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_6_1(monkeypatch)
    with pytest.raises(MissingFeature) as ei:
        Collection.load(arena_object())  # refused before any map exists: nothing to close, no fd leaks
    text = str(ei.value)
    assert "lacks BPF_MAP_TYPE_ARENA (used by map 'capsule_window' (ARENA)" in text
    assert "may_goto (used by program 'capsule_run', insn 1; probe: EINVAL: unknown opcode e5)" in text
    assert text.endswith("build it for this kernel with --profile map-v3")
    assert ei.value.profile == "map-v3" and set(ei.value.missing) == {"arena", "may_goto", "cpu_v4"}


def test_nothing_missing_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_kernel(monkeypatch, set())  # a kernel with everything (as 6.18 and 6.12)
    check_object(arena_object())
    fake_6_1(monkeypatch)
    plain = ObjectSpec(programs={"p": ProgramSpec("p", "socket", ProgType.SOCKET_FILTER, [mov(R0, 0), exit_()])})
    check_object(plain)


def test_the_profile_an_object_was_built_for_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = ObjectSpec(programs={"p": ProgramSpec("p", "socket", ProgType.SOCKET_FILTER, [mov(R0, 0), exit_()])},
                       extra_sections={PROFILE_SECTION: b"arena-v4"})
    fake_kernel(monkeypatch, set())
    check_object(plain)  # a kernel with everything has what arena-v4 needs
    fake_6_1(monkeypatch)
    with pytest.raises(MissingFeature) as ei:
        check_object(plain)  # no arena map and no may_goto in it, but built for a profile that may use them
    assert "may_goto (used by profile arena-v4" in str(ei.value) and ei.value.profile == "map-v3"
    check_object(replace(plain, extra_sections={PROFILE_SECTION: b"map-v3"}))
    with pytest.raises(LoadError, match="unknown kernel profile: no kernel profile 'arena-v9'"):
        check_object(replace(plain, extra_sections={PROFILE_SECTION: b"arena-v9"}))
