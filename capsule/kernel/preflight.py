"""Before loading an object: does this kernel have what it needs? If not, say so plainly, before any verifier.

``object_needs`` reads an ``ObjectSpec`` for the features that older kernels lack (map types, instructions
of cpu v3 and v4, may_goto, kfuncs, sleepable programs) and says where each is used. ``check_object`` asks
the probes (``capsule.kernel.probe``, cached per process) about exactly those, and raises
``MissingFeature`` naming what is missing and the kernel profile to build for instead
(``capsule.kernel.profiles``). An object that names the profile it was built for (``PROFILE_SECTION``) is
also held to everything that profile may use. On a kernel that has everything this costs one probe per feature, once per
process (a few milliseconds), so the common case pays nothing noticeable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import ADDR_SPACE_CAST, CLASS_MASK, MODE_MASK, OP_MASK, Alu, CallKind, Class, Jmp, Mode
from capsule.bpf.spec import ObjectSpec
from capsule.bpf.uapi import MapFlags, MapType, ProgFlags

from .errors import LoadError
from .probe import BY_NAME, probe, probe_all
from .profiles import PROFILE_SECTION, NoProfile, best_profile, profile

# the map types that need a probe, by the probe that answers for them
MAP_PROBES = {MapType.ARENA: "arena", MapType.RINGBUF: "ringbuf", MapType.PROG_ARRAY: "tail_calls"}
_JMP_V2 = {Jmp.JLT, Jmp.JLE, Jmp.JSLT, Jmp.JSLE}


class MissingFeature(LoadError):
    """The object needs features this kernel does not have; ``missing`` maps each probe name to where it is
    used, ``profile`` is the profile this kernel supports (None when none does)."""

    def __init__(self, message: str, missing: dict[str, str], profile: str | None) -> None:
        super().__init__(message)
        self.missing = missing
        self.profile = profile


def insn_feature(ins: Insn) -> str | None:
    """The probe that answers for the newest feature one instruction uses (None for what every kernel has)."""
    cls, op = ins.code & CLASS_MASK, ins.code & OP_MASK
    if ins.code == Class.JMP | Jmp.JCOND:
        return "may_goto"
    if ins.is_gotol:
        return "gotol"
    if cls in (Class.ALU, Class.ALU64):
        if op == Alu.MOV and ins.off == ADDR_SPACE_CAST and cls == Class.ALU64 and ins.imm:
            return "arena"
        if op in (Alu.DIV, Alu.MOD) and ins.off == 1 or op == Alu.MOV and ins.off in (8, 16, 32):
            return "cpu_v4"
        if cls == Class.ALU64 and op == Alu.END:  # bswap
            return "cpu_v4"
    if cls == Class.LDX and ins.code & MODE_MASK == Mode.MEMSX:
        return "cpu_v4"
    if cls == Class.JMP32:
        return "cpu_v3"
    if cls == Class.JMP and op in _JMP_V2:
        return "cpu_v2"
    if ins.is_call and ins.src == CallKind.KFUNC and ins.ref == "bpf_arena_alloc_pages":
        return "arena_alloc_pages"
    return None  # other kfuncs: the loader names one missing from vmlinux BTF before the verifier runs


def object_needs(spec: ObjectSpec, programs: Iterable[str] | None = None) -> dict[str, str]:
    """Probe name -> where the object first needs it ("map 'window' (ARENA)", "program 'capsule_run', insn 12"),
    for its maps and ``programs`` (by default all of them)."""
    needs: dict[str, str] = {}
    for m in spec.maps.values():
        name = MAP_PROBES.get(MapType(m.type)) if m.type in MapType._value2member_map_ else None
        if name is not None:
            needs.setdefault(name, f"map {m.name!r} ({MapType(m.type).name})")
        elif m.type == MapType.ARRAY and m.flags & MapFlags.MMAPABLE:
            needs.setdefault("mmapable_array", f"map {m.name!r} (mmapable ARRAY)")
    chosen = spec.programs.values() if programs is None else [spec.programs[n] for n in programs if n in spec.programs]
    for p in chosen:
        if p.flags & ProgFlags.SLEEPABLE:
            needs.setdefault("sleepable", f"program {p.name!r} (sleepable)")
        slot = 0
        for ins in p.insns:
            feature = insn_feature(ins)
            if feature is not None:
                needs.setdefault(feature, f"program {p.name!r}, insn {slot}")
            slot += ins.slots()
    return needs


def profile_needs(spec: ObjectSpec) -> dict[str, str]:
    """What the profile named in the object's ``PROFILE_SECTION`` needs (nothing when it names none)."""
    raw = spec.extra_sections.get(PROFILE_SECTION)
    if raw is None:
        return {}
    name = raw.rstrip(b"\0").decode(errors="replace").strip()
    try:
        built_for = profile(name)
    except NoProfile as e:
        raise LoadError(f"the object was built for an unknown kernel profile: {e}") from None
    return {need: f"profile {name}" for need in built_for.needs()}


def check_object(spec: ObjectSpec, programs: Iterable[str] | None = None) -> None:
    """Raise ``MissingFeature`` when this kernel lacks something ``spec`` (its profile, its maps, ``programs``)
    uses."""
    needs = {**profile_needs(spec), **object_needs(spec, programs)}
    missing = {name: where for name, where in needs.items() if not probe(name).ok}
    if not missing:
        return
    try:
        fit: str | None = best_profile(probe_all()).name
        advice = f"build it for this kernel with --profile {fit}"
    except NoProfile as e:
        fit, advice = None, str(e)
    lacks = "; ".join(f"{BY_NAME[n].title} (used by {where}; probe: {probe(n).detail})" for n, where in missing.items())
    raise MissingFeature(f"this kernel (Linux {os.uname().release}) lacks {lacks}: {advice}", missing, fit)
