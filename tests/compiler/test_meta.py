"""``.capsule.meta``: the typed records round-trip to exactly the bytes the compiler writes, and metadata that
is damaged (truncated, wrong types, missing keys, indices out of range, data segments that lie about their
bytes) is refused with one ``MetaError`` naming the field, which the runtime reports as a one-line
``CallError`` before anything is loaded (issue 16, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from capsule.bpf.elf_write import write_object
from capsule.bpf.spec import ObjectSpec
from capsule.compiler import abi, compile_module
from capsule.compiler.meta import META_VERSION, Meta, MetaError, MetaVersionError, from_json
from capsule.runtime import CallError, Instance
from capsule.wasm import ExternKind, ValType, load
from tests.compiler.diff_harness import SOURCES, build
from tests.wasm.wasm_build import wat

# every kind of thing the metadata records: imported function and global, memory with active and passive
# data, a table with active and passive elements, exports of all four kinds, a start function
WAT = r"""
(module
  (import "capsule" "yield" (func $yield))
  (import "env" "base" (global $base i32))
  (memory (export "mem") 1 4)
  (table (export "tab") 4 funcref)
  (global $counter (export "counter") (mut i32) (i32.const 7))
  (global $wide i64 (i64.const -5))
  (data (global.get $base) "hello")
  (data "passive bytes")
  (elem (i32.const 1) $get $bump)
  (elem func $get)
  (func $get (export "get") (result i32) (global.get $counter))
  (func $bump (param i32) (result i32)
    (global.set $counter (i32.add (global.get $counter) (local.get 0))) (global.get $counter))
  (func $init (global.set $counter (i32.const 9)))
  (start $init)
)
"""


@pytest.fixture(scope="module")
def spec() -> ObjectSpec:
    return compile_module(load(wat(WAT)))


def _raw(spec: ObjectSpec) -> bytes:
    return spec.extra_sections[abi.META_SECTION]


def _data_size(spec: ObjectSpec) -> int:
    return len(spec.extra_sections[abi.DATA_SECTION])


def test_every_field_is_read_as_written(spec: ObjectSpec) -> None:
    m = from_json(_raw(spec), data_size=_data_size(spec))
    assert m.to_json() == _raw(spec)
    assert m.imported_funcs == 1 and m.funcs[0].entry is None
    assert [f.name for f in m.funcs[1:]] == ["get", "bump", "init"]
    assert all(f.entry in m.regions for f in m.funcs[1:])
    assert m.types[m.funcs[2].type].params == (ValType.I32,)
    assert m.globals[0].imported == ("env", "base") and m.globals[0].init is None
    assert (m.globals[1].type, m.globals[1].mutable) == (ValType.I32, True)
    assert m.memory is not None and (m.memory.initial, m.memory.max) == (1, 4)
    assert [(s.at, s.size, s.offset is None) for s in m.data] == [(0, 5, False), (5, 13, True)]
    assert m.elems[0].items == (2, 3) and m.elems[1].offset is None  # function index + 1
    assert {(e.name, e.kind) for e in m.exports} == {("mem", ExternKind.MEMORY), ("tab", ExternKind.TABLE),
                                                     ("counter", ExternKind.GLOBAL), ("get", ExternKind.FUNC)}
    assert m.start == 3
    assert [f for _, f in m.code_ranges] and m.frame_sizes.keys() == {1, 2, 3}


@pytest.mark.parametrize("name", sorted(p.stem for p in SOURCES.glob("*.c")))
def test_round_trip_of_real_programs(name: str) -> None:
    spec = compile_module(load(build(name)))
    m = from_json(_raw(spec), data_size=_data_size(spec))
    assert isinstance(m, Meta) and m.to_json() == _raw(spec)


def _mutated(spec: ObjectSpec, change: Callable[[dict], object]) -> bytes:
    d = json.loads(_raw(spec))
    change(d)
    return json.dumps(d, separators=(",", ":")).encode()


def _set(path: str, value: object) -> Callable[[dict], None]:
    *parents, last = json.loads(path)

    def change(d: dict) -> None:
        for k in parents:
            d = d[k]
        d[last] = value

    return change


def _delete(*path: str | int) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        for k in path[:-1]:
            d = d[k]
        del d[path[-1]]

    return change


# (what is changed, the error's text)
CORRUPTIONS: list[tuple[str, Callable[[dict], object], str]] = [
    ("top is a list", lambda d: d.clear() or d.update({"x": 1}), "missing key 'version'"),
    ("missing key", _delete("funcs"), "missing key 'funcs'"),
    ("missing nested key", _delete("funcs", 1, "type"), "funcs[1]: missing key 'type'"),
    ("unknown key", _set('["options", "turbo"]', True), "options: unknown key 'turbo'"),
    ("string for int", _set('["options", "fibers"]', "4"), "options.fibers: expected an integer, got a string"),
    ("bool for int", _set('["funcs", 1, "type"]', True), "funcs[1].type: expected an integer, got a boolean"),
    ("int for bool", _set('["options", "checked"]', 1), "options.checked: expected true or false, got an integer"),
    ("bad options", _set('["options", "stack_size"]', 12345), "options: stack_size must be a power of two"),
    ("type index", _set('["funcs", 2, "type"]', 99), "funcs[2].type: 99 is not a type index"),
    ("unknown region", _set('["funcs", 1, "entry"]', 0xFFFF), "funcs[1].entry: 65535 is not a region id"),
    ("import with entry", _set('["funcs", 0, "entry"]', 0), "funcs[0].entry: an imported function has no entry"),
    ("region of no function", _set('["regions", "0"]', 50), "regions[0]: 50 is not a function index"),
    ("region key", lambda d: d["regions"].update({"x1": 1}), "regions: key 'x1' is not a number"),
    ("value type", _set('["types", 0, 0]', ["i33"]), "types[0][0][0]: 'i33' is not a value type"),
    ("export index", _set('["exports", 0, "index"]', 5), "exports[0].index: 5 is not a memory index"),
    ("start index", _set('["start"]', 40), "start: 40 is not a function index"),
    ("stack pointer", _set('["stack_pointer_global"]', 9), "stack_pointer_global: 9 is not a global index"),
    ("elem table", _set('["elems", 0, "table"]', 3), "elems[0].table: 3 is not a table index"),
    ("elem item", _set('["elems", 0, "items", 0]', 77), "elems[0].items[0]: 77 is out of range"),
    ("later global", _set('["globals", 1, "init"]', [[0x23, 2]]), "globals[1].init[0][1]: 2 is not a global index"),
    ("expr opcode", _set('["data", 0, "offset"]', [[0x10, 0]]), "opcode 0x10 is not allowed"),
    ("expr depth", _set('["data", 0, "offset"]', []), "must leave one value, this one leaves 0"),
    ("expr operands", _set('["globals", 2, "init"]', [[0x42, 1], [0x7C, None]]), "without its two operands"),
    ("memory", _set('["memory", "initial"]', 5), "memory.initial: 5 is out of range (0..4)"),
    ("negative size", _set('["frame_sizes", "1"]', -8), "frame_sizes[1]: -8 is below 0"),
    ("code ranges", lambda d: d["code_ranges"].reverse(), "code_ranges[1][0]"),
    ("data at", _set('["data", 1, "at"]', 2), "data[1].at: 2, but the segment's bytes start at 5"),
    ("data size", _set('["data", 1, "size"]', 1000), "data: the segments hold 1005 bytes, the data section 18"),
    ("imported count", _set('["imported_funcs"]', 0), "imported_funcs: 0, but 1 functions are imported"),
]


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_corruption_is_named(spec: ObjectSpec, change: Callable[[dict], object], message: str) -> None:
    with pytest.raises(MetaError) as e:
        from_json(_mutated(spec, change), data_size=_data_size(spec))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("raw", [b"", b'{"version":1,"opt', b"\xff\xfe", b"[" * 100_000, b"[1, 2]"])
def test_not_json_or_not_an_object(raw: bytes) -> None:
    with pytest.raises(MetaError, match="not valid JSON|expected a JSON object"):
        from_json(raw)


def test_another_version_asks_for_a_rebuild(spec: ObjectSpec) -> None:
    with pytest.raises(MetaVersionError, match=f"version {META_VERSION + 1}, this capsule reads {META_VERSION}"):
        from_json(_mutated(spec, _set('["version"]', META_VERSION + 1)))


def _corrupt(spec: ObjectSpec, raw: bytes) -> ObjectSpec:
    return replace(spec, extra_sections={**spec.extra_sections, abi.META_SECTION: raw})


@pytest.mark.parametrize("raw", [
    pytest.param(lambda s: _raw(s)[: len(_raw(s)) // 2], id="truncated"),
    pytest.param(lambda s: _mutated(s, _set('["options", "fibers"]', "4")), id="wrong type"),
    pytest.param(lambda s: _mutated(s, _delete("exports")), id="missing key"),
    pytest.param(lambda s: _mutated(s, _set('["funcs", 3, "type"]', 1000)), id="index out of range"),
    pytest.param(lambda s: _mutated(s, _set('["data", 0, "size"]', 1 << 20)), id="lying data size"),
    pytest.param(lambda s: _mutated(s, _set('["data", 1, "at"]', 1 << 20)), id="lying data offset"),
])
def test_the_runtime_refuses_corrupted_metadata_in_one_line(spec: ObjectSpec, raw: Callable[[ObjectSpec], bytes]
                                                            ) -> None:
    with pytest.raises(CallError, match=r"^corrupted \.capsule\.meta: ") as e:
        Instance(_corrupt(spec, raw(spec)), imports={("env", "base"): 0})
    assert "\n" not in str(e.value)


def test_capsule_call_on_a_corrupted_object(spec: ObjectSpec, tmp_path: Path) -> None:
    obj = tmp_path / "bad.bpf.o"
    write_object(_corrupt(spec, _mutated(spec, _delete("funcs", 1, "name"))), obj)
    res = subprocess.run([sys.executable, "-m", "capsule.cli", "call", str(obj), "get"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1
    assert res.stderr == f"capsule: {obj}: corrupted .capsule.meta: funcs[1]: missing key 'name'\n"
