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

from capsule.bpf.btf_types import Datasec, Kind
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import CallKind, Pseudo
from capsule.bpf.spec import ExternVar, MapSpec, ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapFlags, MapType, ProgType

from .arena import PAGE, Arena
from .btf import load_btf, vmlinux_btf_id
from .errors import BPFError, LoadError, VerifierError
from .kconfig import kallsyms, kconfig_contents
from .maps import Map, possible_cpus
from .preflight import check_object
from .prog import Program
from .sys import FD


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
        """Load ``spec`` (every program libbpf would load by default, i.e. all but ``SEC("?...")`` ones, or
        the named ones). ``rodata`` replaces the initial contents of a data map before it is frozen (how a
        caller sets ``volatile const`` configuration)."""
        names = [n for n, p in spec.programs.items() if p.autoload] if programs is None else list(programs)
        check_object(spec, names)  # a feature this kernel lacks is named here, not by a failed map or verifier
        coll = cls(spec=spec)
        try:
            coll.btf_fd = load_object_btf(spec)
            coll.maps = create_maps(spec, coll.btf_fd, rodata=rodata)
            for name in names:
                if name not in spec.programs:
                    raise LoadError(f"no program named {name!r} (the object has: {', '.join(spec.programs)})")
                try:
                    coll.programs[name] = load_program(
                        spec.programs[name], coll.maps, coll.btf_fd, log_level=log_level
                    )
                except VerifierError as e:
                    e.program = name
                    raise
            fill_prog_arrays(spec, coll.maps, coll.programs)
        except BaseException:
            coll.close()
            raise
        return coll

    def global_var(self, name: str) -> tuple[Map, int, int]:
        """Where a global variable lives: (its data map, offset in element 0, size), from the object's BTF."""
        btf = self.spec.btf if self.spec is not None else None
        if btf is not None:
            for t in btf.iter_types():
                if isinstance(t, Datasec) and t.name in self.maps:
                    for v in t.vars:
                        if btf.name_of(v.type) == name:
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
    return load_btf(spec.btf.for_kernel())


def create_maps(
    spec: ObjectSpec, btf_fd: FD | None, *, rodata: dict[str, bytes] | None = None
) -> dict[str, Map]:
    maps: dict[str, Map] = {}
    try:
        for name, ms in spec.maps.items():
            if rodata and name in rodata:
                ms = replace(ms, contents=_patched(ms, rodata[name]))
            if ms.kconfig:
                ms = replace(ms, contents=kconfig_contents(ms.kconfig, ms.value_size))
            maps[name] = _create_map(ms, btf_fd)
        for name, ms in spec.maps.items():
            if ms.type in (MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS):
                for slot, inner in ms.init_refs.items():
                    if inner not in maps:
                        raise LoadError(f"map {name!r}: slot {slot} holds map {inner!r}, which the object lacks")
                    maps[name].update(slot, maps[inner].fileno().to_bytes(4, "little"))
    except BaseException:
        for m in maps.values():
            m.close()
        raise
    return maps


def _patched(ms: MapSpec, data: bytes) -> bytes:
    if len(data) > ms.value_size:
        raise LoadError(f"initial data for {ms.name!r} is {len(data)} bytes; the map holds {ms.value_size}")
    return data


def fill_prog_arrays(spec: ObjectSpec, maps: dict[str, Map], programs: dict[str, Program]) -> None:
    """Put loaded programs into the program-array slots the object declares (``.values = { [0] = &prog }``);
    slots of programs that were not loaded stay empty, as with libbpf."""
    for name, ms in spec.maps.items():
        if ms.type == MapType.PROG_ARRAY and name in maps:
            for slot, prog in ms.init_refs.items():
                if prog in programs:
                    maps[name].set_prog(slot, programs[prog])


def _ringbuf_size(n: int) -> int:
    """What libbpf makes of a ring buffer's size: the kernel wants a power-of-2 multiple of the page size, so
    anything else is rounded up to the next one (0 stays 0, for the kernel to refuse)."""
    if n == 0 or (n % PAGE == 0 and (n // PAGE) & (n // PAGE - 1) == 0):
        return n
    size = PAGE
    while size <= n:
        size <<= 1
    return size


def _create_map(ms: MapSpec, btf_fd: FD | None) -> Map:
    if ms.type in (MapType.RINGBUF, MapType.USER_RINGBUF):
        ms = replace(ms, max_entries=_ringbuf_size(ms.max_entries))
    if ms.type == MapType.PERF_EVENT_ARRAY and not ms.max_entries:
        # one slot per CPU is what such a map is for, so objects leave the size out; libbpf fills it in
        ms = replace(ms, max_entries=possible_cpus())
    if ms.type == MapType.ARENA:
        # an arena is memory, not elements; the kernel wants its user address fixed (mmap) before a program
        # that uses it loads. With no address given, a 4 GiB-aligned one makes arena offsets and 32-bit arena
        # pointers the same numbers.
        return Arena.create_arena(
            ms.max_entries, name=ms.name, address=ms.map_extra, flags=ms.flags & ~MapFlags.MMAPABLE, align_4g=True
        )
    if ms.inner is None:
        return _from_spec(ms, btf_fd, None)
    # the kernel learns what a map-in-map holds from a template map, which it no longer needs afterwards
    with _create_map(ms.inner, btf_fd) as template:
        return _from_spec(ms, btf_fd, template)


def _from_spec(ms: MapSpec, btf_fd: FD | None, inner: Map | None) -> Map:
    inner_fd = inner.fileno() if inner is not None else None
    try:
        return Map.from_spec(ms, btf_fd=btf_fd, inner_map_fd=inner_fd)
    except BPFError as e:
        if btf_fd is not None and (ms.btf_key_type_id or ms.btf_value_type_id):
            # the kernel refused the BTF description of this map (e.g. a type it cannot check, or a map type
            # that takes no BTF, such as map-in-maps); the map works the same without it
            return Map.from_spec(replace(ms, btf_key_type_id=0, btf_value_type_id=0), inner_map_fd=inner_fd)
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
        elif ins.is_ld_imm64 and ins.src == Pseudo.BTF_ID:
            out.append(_extern(ps, pc, ins, maps))
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


def _extern(ps: ProgramSpec, pc: int, ins: Insn, maps: dict[str, Map]) -> Insn:
    """An ``ld_imm64`` of an extern variable, as libbpf resolves it."""
    ext = ps.externs.get(ins.ref or "") or ExternVar(ins.ref or "")
    where = f"program {ps.name!r}: instruction {pc} loads extern {ext.name!r}"
    if ext.kind == "kconfig":
        m = maps.get(".kconfig")
        if m is None:
            raise LoadError(f"{where} (__kconfig), but the object has no .kconfig map")
        return replace(ins, src=Pseudo.MAP_VALUE, imm=(ext.offset << 32) | m.fileno(), ref=None)
    if ext.kind == "kallsyms":
        try:
            address = kallsyms().get(ext.name)
        except OSError as e:
            raise LoadError(f"{where}: cannot read /proc/kallsyms: {e.strerror}") from None
        if address is None and not ext.weak:
            raise LoadError(f"{where}: no such kernel symbol in /proc/kallsyms")
        return replace(ins, src=Pseudo.NONE, imm=address or 0, ref=None)
    for kind in (Kind.VAR, Kind.FUNC):  # a typed ksym; an ld_imm64 of a kfunc asks whether it exists
        try:
            return replace(ins, imm=vmlinux_btf_id(ext.name, kind), ref=None)
        except (KeyError, LookupError):
            continue
    if ext.weak:
        return replace(ins, src=Pseudo.NONE, imm=0, ref=None)
    raise LoadError(f"{where} (__ksym), which is not in this kernel's BTF")


def load_program(
    ps: ProgramSpec, maps: dict[str, Map], btf_fd: FD | None, *, log_level: int = 0, log_size: int = 0
) -> Program:
    """Resolve and load one program. Raises ``VerifierError`` with the log when the kernel refuses it."""
    if ps.type == ProgType.UNSPEC:  # the reader did not recognise the section name
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
