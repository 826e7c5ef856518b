"""What the host checks in a compiled object before it creates, loads or writes anything for it.

A ``.bpf.o`` handed to ``capsule run`` or ``capsule call`` may have been edited, truncated or written by hand. The
kernel's verifier decides whether its code is safe to run; everything else the host acts on is checked here or in
``Meta.from_json`` (the ``.capsule.meta`` record: indices, sizes, layouts, constant expressions). Here: the object
holds exactly the maps the compiler makes, shaped as the compiler makes them (one 4 GiB arena at an address the
host chooses, or the map window's two pieces; for a split object one program array with a slot per program;
for a hook object its ring buffer), and the programs the metadata
names are tc programs that refer to nothing but those maps and kernel functions. An object that breaks a rule is
refused with one ``UntrustedObject`` naming it, before any map exists.
"""

from __future__ import annotations

from capsule.bpf.opcodes import Pseudo
from capsule.bpf.spec import MapSpec, ObjectSpec
from capsule.bpf.uapi import MapFlags, MapType, ProgType
from capsule.compiler import abi, hook_abi

from .errors import CallError

WINDOW_PAGES = abi.GIB4 // abi.PAGE
RUN_PROGRAM_TYPE = ProgType.SCHED_CLS  # run with BPF_PROG_TEST_RUN; a split object's parts tail-call each other


class UntrustedObject(CallError):
    """The object is not shaped as capsule's compiler shapes one: it is refused before anything is created."""


def check_object(spec: ObjectSpec, names: list[str]) -> None:
    """Refuse ``spec`` unless its maps and the programs ``names`` (the metadata's) are as the compiler makes them."""
    allowed = {abi.WINDOW_MAP: _check_window, abi.PROGRAMS_MAP: _check_programs_map,
               hook_abi.RING_MAP: _check_ring, **dict.fromkeys(abi.MAP_PIECES, _check_piece)}
    for name, ms in spec.maps.items():
        if name not in allowed:
            _refuse(f"map {name!r} is not one capsule's compiler makes ({', '.join(allowed)})")
        allowed[name](ms, len(names))
    pieces = [name for name in abi.MAP_PIECES if name in spec.maps]
    if abi.WINDOW_MAP in spec.maps and pieces:
        _refuse(f"both an arena and map-window pieces ({', '.join(pieces)}): a window is one or the other")
    if abi.WINDOW_MAP not in spec.maps and len(pieces) != len(abi.MAP_PIECES):
        _refuse(f"no {abi.WINDOW_MAP!r} map and not the map window's pieces ({', '.join(abi.MAP_PIECES)}): "
                "the object has no memory window")
    if (len(names) > 1) != (abi.PROGRAMS_MAP in spec.maps):
        _refuse(f"{len(names)} program(s) and {'a' if abi.PROGRAMS_MAP in spec.maps else 'no'} "
                f"{abi.PROGRAMS_MAP!r} map: a split object has one, a whole one none")
    for name in names:
        ps = spec.programs[name]
        if ps.type != RUN_PROGRAM_TYPE:
            _refuse(f"program {name!r} is {ProgType(ps.type).label}, not a tc program")
        if ps.externs:
            _refuse(f"program {name!r} refers to extern symbols ({', '.join(sorted(ps.externs))})")
        for pc, ins in enumerate(ps.insns):
            if ins.ref is None or not ins.is_ld_imm64:
                continue  # kernel functions (kfunc calls) are the verifier's to allow or refuse
            value = ins.src == Pseudo.MAP_VALUE and ins.ref in abi.MAP_PIECES  # a map-window piece's address
            if not (ins.src == Pseudo.MAP_FD or value) or ins.ref not in spec.maps:
                _refuse(f"program {name!r}: instruction {pc} loads {ins.ref!r}, which is not one of its maps")


def _check_window(ms: MapSpec, nprograms: int) -> None:
    what = f"map {abi.WINDOW_MAP!r}"
    if ms.type != MapType.ARENA:
        _refuse(f"{what} is a {MapType(ms.type).label} map, not an arena")
    if ms.max_entries != WINDOW_PAGES:
        _refuse(f"{what} has {ms.max_entries} pages; the window is {WINDOW_PAGES} (4 GiB)")
    if ms.map_extra:
        _refuse(f"{what} asks for address {ms.map_extra:#x}; the host chooses where the window goes")
    if ms.flags & ~MapFlags.MMAPABLE or ms.contents is not None or ms.inner is not None or ms.key_size \
            or ms.value_size:
        _refuse(f"{what} has flags, contents or a shape the compiler does not give it")


def _check_piece(ms: MapSpec, nprograms: int) -> None:
    """A map-window piece: one mmapable array element of whole pages that fits its place."""
    what = f"map {ms.name!r}"
    room = abi.GIB4 - abi.MAP_PIECES.get(ms.name, 0)
    size = ms.value_size
    if ms.type != MapType.ARRAY or ms.key_size != 4 or ms.max_entries != 1 or ms.flags != MapFlags.MMAPABLE:
        _refuse(f"{what} is not one mmapable array element")
    zero = ms.contents is None or not any(ms.contents)  # its ELF form (.bss) may spell the zeros out
    if size < abi.PAGE or size % abi.PAGE or size > room or not zero or ms.inner is not None:
        _refuse(f"{what} is {size} bytes or has contents: a piece is whole zeroed pages within the window")


def _check_ring(ms: MapSpec, nprograms: int) -> None:
    if ms.type != MapType.RINGBUF or ms.key_size or ms.value_size or ms.contents is not None:
        _refuse(f"map {ms.name!r} is not a ring buffer")
    if ms.max_entries < abi.PAGE or ms.max_entries & (ms.max_entries - 1):
        _refuse(f"map {ms.name!r}: a ring buffer of {ms.max_entries} bytes (a power of two of pages)")


def _check_programs_map(ms: MapSpec, nprograms: int) -> None:
    what = f"map {abi.PROGRAMS_MAP!r}"
    if ms.type != MapType.PROG_ARRAY or ms.key_size != 4 or ms.value_size != 4:
        _refuse(f"{what} is not a program array of 4-byte slots")
    if ms.max_entries != nprograms or ms.init_refs or ms.contents is not None or ms.flags:
        _refuse(f"{what} has {ms.max_entries} slots, contents or flags; the object has {nprograms} programs")


def _refuse(why: str) -> None:
    raise UntrustedObject(f"not a capsule-compiled object: {why}")
