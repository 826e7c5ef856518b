"""From an ``ObjectSpec`` to live maps and programs (cilium/ebpf's ``NewCollection``).

Loading happens in three steps, each of which can be used alone:

1. ``load_btf`` hands the object's BTF to the kernel (needed for func_info/line_info and BTF-described maps);
2. ``create_maps`` creates every map, fills global data and freezes ``.rodata``;
3. ``load_program`` resolves a program's symbolic references (map fds, map values, kfunc BTF ids; see
   ``capsule.bpf.spec``) and loads it.

``Collection.load`` does all three and owns what it created; ``capsule verify`` uses the steps one program
at a time so that one rejected program does not hide the verdict on the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from capsule.bpf.btf_types import Datasec
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CallKind, Pseudo
from capsule.bpf.spec import MapSpec, ObjectSpec, ProgramSpec

from .arena import Arena
from .btf import load_btf, vmlinux_btf_id
from .consts import MapFlags, MapType
from .errors import BPFError
from .maps import Map
from .prog import Program
from .sys import FD


class LoadError(Exception):
    """An object could not be loaded for a reason found before (or instead of) the kernel's verdict."""


@dataclass
class Collection:
    """Live maps and programs of one object. Close it (or use ``with``) to release every fd."""

    maps: dict[str, Map] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)
    btf_fd: FD | None = None
    spec: ObjectSpec | None = None

    @classmethod
    def load(
        cls,
        spec: ObjectSpec,
        *,
        programs: Iterable[str] | None = None,
        log_level: int = 0,
        rodata: dict[str, bytes] | None = None,
    ) -> Collection:
        """Load ``spec`` (all programs, or the named ones). ``rodata`` replaces the initial contents of a data
        map before it is frozen (how a caller sets ``volatile const`` configuration)."""
        coll = cls(spec=spec)
        try:
            coll.btf_fd = load_object_btf(spec)
            coll.maps = create_maps(spec, coll.btf_fd, rodata=rodata)
            names = list(spec.programs) if programs is None else list(programs)
            for name in names:
                if name not in spec.programs:
                    raise LoadError(f"no program named {name!r} (the object has: {', '.join(spec.programs)})")
                coll.programs[name] = load_program(
                    spec.programs[name], coll.maps, coll.btf_fd, log_level=log_level
                )
        except BaseException:
            coll.close()
            raise
        return coll

    def global_var(self, name: str) -> tuple[Map, int, int]:
        """Where a global variable lives: (its data map, offset in element 0, size), from the object's BTF."""
        btf = self.spec.btf if self.spec is not None else None
        if btf is not None:
            for t in btf.iter_types():  # type: ignore[attr-defined]
                if isinstance(t, Datasec) and t.name in self.maps:
                    for v in t.vars:
                        if btf.name_of(v.type) == name:  # type: ignore[attr-defined]
                            return self.maps[t.name], v.offset, v.size
        raise KeyError(f"no global variable {name!r} in the object's data sections")

    def read_global(self, name: str) -> bytes:
        m, off, size = self.global_var(name)
        value = m.lookup(0)
        assert value is not None  # an ARRAY's element 0 always exists
        return value[off : off + size]

    def write_global(self, name: str, data: bytes) -> None:
        m, off, size = self.global_var(name)
        if len(data) != size:
            raise ValueError(f"global {name!r} is {size} bytes, got {len(data)}")
        value = bytearray(m.lookup(0) or b"")
        value[off : off + size] = data
        m.update(0, bytes(value))

    def close(self) -> None:
        for p in self.programs.values():
            p.close()
        for m in self.maps.values():
            m.close()
        if self.btf_fd is not None:
            self.btf_fd.close()
        self.programs, self.maps, self.btf_fd = {}, {}, None

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_object_btf(spec: ObjectSpec) -> FD | None:
    """Load the object's BTF. Objects without BTF (hand-built ones) load without func/line info."""
    if spec.btf is None:
        return None
    return load_btf(spec.btf.for_kernel())  # type: ignore[attr-defined]


def create_maps(
    spec: ObjectSpec, btf_fd: FD | None, *, rodata: dict[str, bytes] | None = None
) -> dict[str, Map]:
    maps: dict[str, Map] = {}
    try:
        for name, ms in spec.maps.items():
            if rodata and name in rodata:
                ms = replace(ms, contents=_patched(ms, rodata[name]))
            maps[name] = _create_map(ms, btf_fd)
    except BaseException:
        for m in maps.values():
            m.close()
        raise
    return maps


def _patched(ms: MapSpec, data: bytes) -> bytes:
    if len(data) > ms.value_size:
        raise LoadError(f"initial data for {ms.name!r} is {len(data)} bytes; the map holds {ms.value_size}")
    return data


def _create_map(ms: MapSpec, btf_fd: FD | None) -> Map:
    if ms.type == MapType.ARENA:
        # an arena is memory, not elements; the kernel wants its user address fixed (mmap) before a program
        # that uses it loads. With no address given, a 4 GiB-aligned one makes arena offsets and 32-bit arena
        # pointers the same numbers.
        return Arena.create_arena(
            ms.max_entries, name=ms.name, address=ms.map_extra, flags=ms.flags & ~MapFlags.MMAPABLE, align_4g=True
        )
    try:
        return Map.from_spec(ms, btf_fd=btf_fd)
    except BPFError as e:
        if btf_fd is not None and (ms.btf_key_type_id or ms.btf_value_type_id):
            # the kernel refused the BTF description of this map (e.g. a type it cannot check); the
            # map works the same without it
            return Map.from_spec(replace(ms, btf_key_type_id=0, btf_value_type_id=0), btf_fd=None)
        raise LoadError(f"creating map {ms.name!r}: {e}") from e


def resolve_refs(ps: ProgramSpec, maps: dict[str, Map]) -> list[Insn]:
    """A copy of the program's instructions with every symbolic reference resolved for the kernel."""
    out: list[Insn] = []
    for pc, ins in enumerate(ps.insns):
        if ins.ref is None:
            out.append(ins)
            continue
        if ins.is_ld_imm64 and ins.src in (Pseudo.MAP_FD, Pseudo.MAP_VALUE):
            m = maps.get(ins.ref)
            if m is None:
                raise LoadError(
                    f"program {ps.name!r}: instruction {pc} refers to map {ins.ref!r}, "
                    f"which the object does not define"
                )
            offset = (ins.imm >> 32) if ins.src == Pseudo.MAP_VALUE else 0
            out.append(replace(ins, imm=(offset << 32) | m.fileno(), ref=None))
        elif ins.is_call and ins.src == CallKind.KFUNC:
            try:
                btf_id = vmlinux_btf_id(ins.ref)
            except (KeyError, LookupError) as e:
                raise LoadError(f"program {ps.name!r}: kfunc {ins.ref!r} is not in this kernel's BTF") from e
            out.append(replace(ins, imm=btf_id, off=0, ref=None))
        else:
            raise LoadError(
                f"program {ps.name!r}: instruction {pc} ({ins!r}) has a reference the loader cannot resolve"
            )
    return out


def load_program(
    ps: ProgramSpec, maps: dict[str, Map], btf_fd: FD | None, *, log_level: int = 0, log_size: int = 0
) -> Program:
    """Resolve and load one program. Raises ``VerifierError`` with the log when the kernel refuses it."""
    if ps.type == 0:  # BPF_PROG_TYPE_UNSPEC: the reader did not recognise the section name
        raise LoadError(f"program {ps.name!r}: section {ps.section!r} names no program type capsule can load")
    insns = resolve_refs(ps, maps)
    with_btf = btf_fd is not None and bool(ps.func_infos)
    return Program.load(
        ps.type,
        insns,
        license=ps.license,
        name=ps.name[:15],
        log_level=log_level,
        log_size=log_size,
        expected_attach_type=ps.expected_attach_type,
        prog_flags=ps.flags,
        prog_btf_fd=btf_fd if with_btf else None,
        func_info=ps.func_infos if with_btf else (),
        line_info=ps.line_infos if with_btf else (),
    )
