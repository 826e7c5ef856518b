"""capsule.bpf.uapi: open program and map types, and the object model that carries them."""

import pytest

from capsule.bpf.asm import R0, exit_, mov
from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import object_bytes
from capsule.bpf.spec import MapSpec, ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapType, ProgType


def test_listed_numbers_are_members() -> None:
    assert ProgType(6) is ProgType.XDP and ProgType(6).known and ProgType(6).label == "XDP"
    assert MapType(33) is MapType.ARENA


def test_unknown_number_is_a_pseudo_member_that_keeps_it() -> None:
    t = MapType(250)
    assert t == 250 and int(t) == 250 and not t.known
    assert t.label == "250" and t.name == "UNKNOWN_250"
    assert MapType(250) is t  # the same member every time, as for listed values
    assert ProgType(251).label == "251"


def test_negative_or_non_integer_is_refused() -> None:
    with pytest.raises(ValueError):
        ProgType(-1)
    with pytest.raises(ValueError):
        MapType("ARRAY")


def test_specs_hold_enums_whoever_builds_them() -> None:
    m = MapSpec("m", 2, 4, 8, 1)
    assert m.type is MapType.ARRAY
    p = ProgramSpec("p", "xdp", 6, [])
    assert p.type is ProgType.XDP


def test_object_with_an_unknown_map_type_reads_back() -> None:
    spec = ObjectSpec(
        programs={"p": ProgramSpec("p", "xdp", ProgType.XDP, [mov(R0, 2), exit_()])},
        maps={"future": MapSpec("future", 250, 4, 8, 16)},
    )
    back = read_object(object_bytes(spec))
    assert back.maps["future"].type == 250 and not back.maps["future"].type.known
    assert back.programs["p"].type is ProgType.XDP
