"""BTF the object writer synthesizes when the ``ObjectSpec`` does not bring it.

libbpf reads maps from BTF (``struct { int (*type)[T]; int (*max_entries)[N]; K *key; V *value; }``), needs a
DATASEC with VARs backed by ELF symbols for each global data section, a FUNC for every function (func_info),
and an extern FUNC with a prototype compatible with the kernel's for every kfunc. These helpers add such types
to a ``BTF`` and return their ids.
"""

from __future__ import annotations

from .btf import BTF, Linkage
from .btf_types import Datasec, Enum64, EnumValue, Func, Var
from .spec import MapSpec

# map types whose key/value the kernel accepts BTF for; other types are described by key_size/value_size
# (hash, array, per-cpu and LRU variants, LPM trie, cgroup storage, queue, stack, sk/inode/task/cgrp
# storage, bloom filter)
_BTF_KV_MAP_TYPES = {1, 2, 5, 6, 9, 10, 11, 19, 21, 22, 23, 24, 28, 29, 30, 32}


def program_func_type(btf: BTF, name: str) -> int:
    """FUNC ``int name(void *ctx)``, global: the shape of a program entry point."""
    int_id = btf.int_id(4, signed=True)
    ctx = btf.add_ptr(0)
    return btf.add_func(name, btf.add_func_proto(int_id, [("ctx", ctx)]), Linkage.GLOBAL)


def subprog_func_type(btf: BTF, name: str) -> int:
    """FUNC ``static long long name(void)``: static subprograms are verified in their caller's context, so
    the kernel needs only a FUNC to name them, not a faithful prototype."""
    ret = btf.int_id(8, signed=True)
    return btf.add_func(name, btf.add_func_proto(ret, []), Linkage.STATIC)


def _sized_type(btf: BTF, size: int) -> int:
    if size in (1, 2, 4, 8):
        return btf.int_id(size)
    return btf.add_array(btf.int_id(1), size)


def _uint_member(btf: BTF, value: int) -> int:
    """``int (*name)[value]``: libbpf's ``__uint``."""
    return btf.add_ptr(btf.add_array(btf.int_id(4, signed=True), value))


def map_def_var(btf: BTF, m: MapSpec, from_spec_btf: bool) -> int:
    """Add a BTF map definition for ``m`` (as ``struct { __uint(type, ...); ... }`` does); returns the VAR."""
    members: list[tuple[str, int]] = [
        ("type", _uint_member(btf, m.type)),
        ("max_entries", _uint_member(btf, m.max_entries)),
    ]
    if m.type in _BTF_KV_MAP_TYPES:
        for what, size, tid in (
            ("key", m.key_size, m.btf_key_type_id),
            ("value", m.value_size, m.btf_value_type_id),
        ):
            if not size:
                continue
            if not (from_spec_btf and tid and btf.size_of(tid) == size):
                tid = _sized_type(btf, size)
            members.append((what, btf.add_ptr(tid)))
    else:
        if m.key_size:
            members.append(("key_size", _uint_member(btf, m.key_size)))
        if m.value_size:
            members.append(("value_size", _uint_member(btf, m.value_size)))
    if m.flags:
        members.append(("map_flags", _uint_member(btf, m.flags)))
    if m.map_extra:
        if m.map_extra < 1 << 31:
            members.append(("map_extra", _uint_member(btf, m.map_extra)))
        else:  # libbpf's __ulong: an enum whose only value is the number
            e = btf.add(Enum64("", 8, [EnumValue(f"__capsule_{_ident(m.name)}_map_extra", m.map_extra)]))
            members.append(("map_extra", e))
    struct_id = btf.add_struct("", 8 * len(members), [(n, t, 64 * i) for i, (n, t) in enumerate(members)])
    return btf.add_var(m.name, struct_id, Linkage.GLOBAL)


def data_section_vars(btf: BTF, section: str, size: int) -> list[tuple[str, int, int]]:
    """Make sure section ``section`` has a DATASEC of ``size`` bytes; returns (name, offset, size) of its
    global VARs, for which the writer must emit ELF symbols (libbpf matches VARs to symbols by name)."""
    ids = btf.find_ids(section, Datasec.kind)
    if ids:
        ds = btf.type_by_id(ids[0])
        assert isinstance(ds, Datasec)
        if ds.size == 0:
            ds.size = size
    else:
        name = "__capsule" + _ident(section)
        var = btf.add_var(name, btf.add_array(btf.int_id(1), size), Linkage.GLOBAL)
        ds = btf.type_by_id(btf.add_datasec(section, size, [(var, 0, size)]))
        assert isinstance(ds, Datasec)
    out = []
    for vs in ds.vars:
        v = btf.type_by_id(vs.type)
        if isinstance(v, Var) and v.linkage == Linkage.GLOBAL:
            out.append((v.name, vs.offset, vs.size))
    return out


def kfunc_type(btf: BTF, vmlinux: BTF, name: str) -> int:
    """An extern FUNC for kfunc ``name`` whose prototype is copied from the kernel's BTF."""
    ids = [i for i in vmlinux.find_ids(name) if isinstance(vmlinux.type_by_id(i), Func)]
    if not ids:
        raise ValueError(f"kfunc {name!r} is not a function in the kernel's BTF")
    f = vmlinux.type_by_id(ids[0])
    assert isinstance(f, Func)
    proto = btf.copy_type(vmlinux, f.type)
    return btf.add_func(name, proto, Linkage.EXTERN)


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
