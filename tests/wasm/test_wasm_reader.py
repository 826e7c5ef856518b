"""The binary reader: data model, immediates, block structure, names, and every way bytes can be wrong."""

from __future__ import annotations

import random
import struct

import pytest
from wasm_build import compile_c, wat

from capsule.wasm import (
    BlockType,
    BrTable,
    ExternKind,
    Instr,
    MalformedError,
    MemArg,
    Op,
    SegmentMode,
    UnsupportedError,
    ValType,
    WasmError,
    load,
    read_module,
)
from capsule.wasm.reader import _Reader

HEADER = b"\0asm\x01\0\0\0"


def leb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            return bytes(out + bytes([b]))
        out.append(b | 0x80)


def vec(items: list[bytes]) -> bytes:
    return leb(len(items)) + b"".join(items)


def section(sid: int, payload: bytes) -> bytes:
    return bytes([sid]) + leb(len(payload)) + payload


def one_func(code: bytes, locals_: bytes = b"\0", ftype: bytes = b"\x60\0\0", extra: bytes = b"") -> bytes:
    """A module with one function of type ``ftype`` whose body is ``locals_ + code``."""
    body = locals_ + code
    return (
        HEADER
        + section(1, vec([ftype]))
        + section(3, vec([b"\0"]))
        + extra
        + section(10, vec([leb(len(body)) + body]))
    )


# ---- primitives ----


@pytest.mark.parametrize(
    "raw,value",
    [
        (b"\x00", 0),
        (b"\x7f", 127),
        (b"\x80\x01", 128),
        (b"\xff\xff\xff\xff\x0f", 0xFFFF_FFFF),
        (b"\x80\x80\x80\x80\x00", 0),
    ],
)
def test_u32(raw: bytes, value: int) -> None:
    r = _Reader(raw)
    assert r.u32() == value and r.at_end()


@pytest.mark.parametrize(
    "raw,message",
    [
        (b"\xff\xff\xff\xff\x1f", "integer too large"),
        (b"\x80\x80\x80\x80\x80\x00", "integer representation too long"),
        (b"\x80\x80", "unexpected end"),
    ],
)
def test_u32_malformed(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        _Reader(raw).u32()


@pytest.mark.parametrize(
    "raw,bits,value",
    [
        (b"\x7f", 32, -1),
        (b"\x80\x80\x80\x80\x78", 32, -(1 << 31)),
        (b"\xff\xff\xff\xff\x07", 32, (1 << 31) - 1),
        (b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x7f", 64, -(1 << 63)),
        (b"\x40", 64, -64),
    ],
)
def test_signed(raw: bytes, bits: int, value: int) -> None:
    r = _Reader(raw)
    assert (r.s32() if bits == 32 else r.s64()) == value


@pytest.mark.parametrize(
    "raw,bits",
    [
        (b"\xff\xff\xff\xff\x4f", 32),
        (b"\x80\x80\x80\x80\x70", 32),
        (b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 64),
    ],
)
def test_signed_unused_bits(raw: bytes, bits: int) -> None:
    with pytest.raises(MalformedError, match="integer too large"):
        _Reader(raw).s32() if bits == 32 else _Reader(raw).s64()


# ---- the data model ----

WAT = r"""(module $demo
  (type $bin (func (param i32 i32) (result i32)))
  (import "env" "log" (func $log (param i32)))
  (import "env" "g" (global $g i32))
  (memory (export "mem") 1 2)
  (table $tab 4 funcref)
  (global $counter (mut i64) (i64.const -5))
  (func $add (type $bin) (local $tmp f32) (local f64 f64)
    (block $out (result i32)
      (loop $again
        (if (local.get 0) (then (br $again)) (else (nop)))
        (block $in (br_table $again $in $again (local.get 1))))
      (unreachable)))
  (func $mem (param i32)
    (i64.store offset=8 align=4 (local.get 0) (i64.const 0x8000000000000000))
    (f32.store (local.get 0) (f32.const nan:0x200000))
    (drop (f64.const -0x1p-1074))
    (call_indirect $tab (type $bin) (i32.const 1) (i32.const 2) (i32.const 0)) drop
    (memory.fill (i32.const 0) (i32.const 0) (i32.const 0))
    (drop (select (result f32) (f32.const 1) (f32.const 2) (i32.const 0)))
    (drop (ref.null extern)))
  (elem (i32.const 1) func $add $mem)
  (elem $p funcref (ref.func $add) (ref.null func))
  (data (i32.const 16) "hi")
  (data $pd "passive")
  (export "add" (func $add))
  (start $start)
  (func $start))
"""


@pytest.fixture(scope="module")
def demo():  # type: ignore[no-untyped-def]
    return load(wat(WAT))


def test_module_structure(demo) -> None:  # type: ignore[no-untyped-def]
    m = demo
    assert m.names.module == "demo"
    assert [(i.module, i.name, i.kind) for i in m.imports] == [
        ("env", "log", ExternKind.FUNC),
        ("env", "g", ExternKind.GLOBAL),
    ]
    assert m.num_imported_funcs == 1 and m.num_imported_globals == 1
    assert [m.func_name(i) for i in range(4)] == ["log", "add", "mem", "start"]
    assert m.func_type(1).params == (ValType.I32, ValType.I32) and m.func_type(0).params == (ValType.I32,)
    assert m.defined_func(0) is None and m.defined_func(1) is m.funcs[0]
    assert m.all_memories()[0].limits.min == 1 and m.all_memories()[0].limits.max == 2
    assert m.all_tables()[0].elem == ValType.FUNCREF and m.all_tables()[0].limits.min == 4
    g = m.all_globals()
    assert g[0].type == ValType.I32 and not g[0].mutable and g[1].type == ValType.I64 and g[1].mutable
    assert m.globals[0].init[0].imm == -5
    assert m.start == 3
    assert m.export("add").kind == ExternKind.FUNC and m.export("mem").kind == ExternKind.MEMORY  # type: ignore[union-attr]


def test_locals_and_names(demo) -> None:  # type: ignore[no-untyped-def]
    f = demo.funcs[0]
    assert f.locals == (ValType.I32, ValType.I32, ValType.F32, ValType.F64, ValType.F64) and f.num_params == 2
    assert demo.local_name(1, 2) == "tmp"


def test_block_structure(demo) -> None:  # type: ignore[no-untyped-def]
    body = demo.funcs[0].body
    names = [Op(i.op).name for i in body]
    block, loop, if_ = names.index("BLOCK"), names.index("LOOP"), names.index("IF")
    else_ = names.index("ELSE")
    assert body[block].imm == BlockType(result=ValType.I32) and body[loop].imm == BlockType()
    assert body[if_].else_ == else_ and body[if_].end == body[else_].end
    assert body[body[if_].end].op == Op.END and body[if_].end < body[loop].end < body[block].end
    assert body[block].end == len(body) - 2 and body[-1].op == Op.END
    brt = next(i for i in body if i.op == Op.BR_TABLE)
    assert brt.imm == BrTable((1, 0), 1)  # depths counted from the innermost block


def test_immediates(demo) -> None:  # type: ignore[no-untyped-def]
    body = demo.funcs[1].body
    by_op: dict[int, Instr] = {}
    for ins in body:
        by_op.setdefault(ins.op, ins)  # the first of each opcode
    assert by_op[Op.I64_STORE].imm == MemArg(align=2, offset=8)
    assert by_op[Op.I64_CONST].imm == -(1 << 63)
    assert by_op[Op.F32_CONST].imm == 0x7FA00000  # NaN payload kept as raw bits
    assert by_op[Op.F64_CONST].imm == 0x8000000000000001
    assert by_op[Op.CALL_INDIRECT].imm == (0, 0)
    assert by_op[Op.MEMORY_FILL].imm == 0
    assert by_op[Op.SELECT_T].imm == (ValType.F32,)
    assert by_op[Op.REF_NULL].imm == ValType.EXTERNREF


def test_segments(demo) -> None:  # type: ignore[no-untyped-def]
    active, passive = demo.elems
    assert active.mode == SegmentMode.ACTIVE and active.func_indices() == [1, 2] and active.table == 0
    assert active.offset_expr[0].imm == 1
    assert passive.mode == SegmentMode.PASSIVE and passive.func_indices() == [1, None]
    d0, d1 = demo.datas
    assert (d0.mode, d0.init, d0.offset_expr[0].imm) == (SegmentMode.ACTIVE, b"hi", 16)
    assert (d1.mode, d1.init) == (SegmentMode.PASSIVE, b"passive")


def test_instruction_offsets_point_at_opcodes() -> None:
    data = wat(WAT)
    m = read_module(data)
    for f in m.funcs:
        for ins in f.body:
            first = data[ins.offset]
            assert first == (0xFC if ins.op >= 0xFC00 else ins.op), ins


def test_custom_sections_kept() -> None:
    data = HEADER + section(0, vec([b"x"])[0:0] + leb(4) + b"meta" + b"\x01\x02")
    m = load(data)
    assert [(c.name, c.data) for c in m.customs] == [("meta", b"\x01\x02")]


def test_broken_name_section_is_ignored() -> None:
    m = load(HEADER + section(0, leb(4) + b"name" + b"\x01\x05\x01\x00\x09ab"))
    assert m.names.funcs == {} and m.func_name(0) is None


# ---- malformed and unsupported binaries ----

MALFORMED = {
    "bad magic": (b"\0asx\x01\0\0\0", "magic header"),
    "bad version": (b"\0asm\x02\0\0\0", "unknown binary version"),
    "unknown section": (HEADER + section(14, b""), "malformed section id"),
    "section out of order": (HEADER + section(3, vec([])) + section(1, vec([])), "unexpected type section"),
    "duplicate section": (HEADER + section(1, vec([])) + section(1, vec([])), "unexpected type section"),
    "section size mismatch": (HEADER + section(1, vec([]) + b"\0"), "section size mismatch"),
    "section too long": (HEADER + b"\x01\x05\x00", "out of bounds"),
    "functions without code": (
        HEADER + section(1, vec([b"\x60\0\0"])) + section(3, vec([b"\0"])),
        "function and code section have inconsistent lengths",
    ),
    "illegal opcode": (one_func(b"\xff\x0b"), "illegal opcode 0xff"),
    "illegal 0xfc opcode": (one_func(b"\xfc\x20\x0b"), "illegal opcode 0xfc"),
    "missing end": (one_func(b"\x01"), "END opcode expected"),
    "bytes after end": (one_func(b"\x0b\x01"), "section size mismatch"),
    "else without if": (one_func(b"\x02\x40\x05\x0b\x0b"), "else without a matching if"),
    "too many locals": (one_func(b"\x0b", b"\x02\xff\xff\xff\xff\x0f\x7f\x02\x7e"), "too many locals"),
    "bad value type": (one_func(b"\x0b", b"\x01\x01\x55"), "malformed value type"),
    "memory.init without data count": (one_func(b"\xfc\x08\x00\x00\x0b"), "data count section required"),
    "bad utf-8 name": (HEADER + section(0, b"\x02\xc3\x28"), "malformed UTF-8"),
    "bad import kind": (HEADER + section(2, vec([b"\x01m\x01n\x07\x00"])), "malformed import kind"),
    "bad mutability": (HEADER + section(6, vec([b"\x7f\x02\x41\x00\x0b"])), "malformed mutability"),
    "bad limits flag": (HEADER + section(5, vec([b"\x08\x00"])), "malformed limits flags"),
    "bad elem kind": (HEADER + section(9, vec([b"\x08"])), "malformed elements segment kind"),
    "bad data kind": (HEADER + section(11, vec([b"\x03"])), "malformed data segment kind"),
    "data count mismatch": (
        HEADER + section(12, b"\x02") + section(11, vec([b"\x01\x00"])),
        "data count and data section have inconsistent lengths",
    ),
    "vector longer than section": (HEADER + section(1, b"\x7f"), "length out of bounds"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed(name: str) -> None:
    data, message = MALFORMED[name]
    with pytest.raises(MalformedError, match=message) as info:
        read_module(data)
    assert info.value.offset is not None


def test_malformed_body_names_function() -> None:
    data = bytearray(wat("(module (func $first) (func $second nop))"))
    m = read_module(bytes(data))
    nop = next(i for i in m.funcs[1].body if i.op == Op.NOP)
    data[nop.offset] = 0xFF
    with pytest.raises(MalformedError) as info:
        read_module(bytes(data))
    assert str(info.value) == f'malformed: illegal opcode 0xff (function 1 "second", offset {nop.offset:#x})'


UNSUPPORTED = {
    "SIMD prefix": (one_func(b"\xfd\x0c" + bytes(16) + b"\x1a\x0b"), "SIMD"),
    "v128 local": (one_func(b"\x0b", b"\x01\x01\x7b"), "SIMD"),
    "memory64": (HEADER + section(5, vec([b"\x04\x01"])), "memory64"),
    "tag section": (HEADER + section(13, vec([])), "exception handling"),
    "tail call": (one_func(b"\x12\x00\x0b"), "tail calls"),
    "exceptions": (one_func(b"\x06\x40\x0b\x0b"), "exception handling"),
    "gc types": (HEADER + section(1, vec([b"\x5f\x00"])), "GC"),
    "typed references": (one_func(b"\x0b", b"\x01\x01\x64\x70"), "typed function references"),
    "second memory in memarg": (one_func(b"\x41\x00\x28\x42\x01\x00\x1a\x0b"), "multiple memories"),
}


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_unsupported(name: str) -> None:
    data, message = UNSUPPORTED[name]
    with pytest.raises(UnsupportedError, match=message):
        read_module(data)


def test_threads_instructions_and_shared_memory() -> None:
    """The threads proposal: 0xFE-prefixed opcodes (memargs, the fence's zero byte) and shared limits."""
    mem = section(5, vec([b"\x03\x01\x02"]))  # shared, 1..2 pages
    code = (b"\x41\x00\x41\x01\xfe\x1e\x02\x08\x1a"  # i32.atomic.rmw.add align=4 offset=8; drop
            b"\xfe\x03\x00"  # atomic.fence
            b"\x41\x00\x42\x00\x42\x07\xfe\x49\x03\x00\x1a\x0b")  # i64.atomic.rmw.cmpxchg; drop
    m = load(HEADER + section(1, vec([b"\x60\0\0"])) + section(3, vec([b"\0"])) + mem
             + section(10, vec([leb(len(code) + 1) + b"\0" + code])))
    assert m.memories[0].limits.shared and m.memories[0].limits.max == 2
    body = m.funcs[0].body
    assert [i.op for i in body if i.op >= 0xFE00] == [Op.I32_ATOMIC_RMW_ADD, Op.ATOMIC_FENCE,
                                                      Op.I64_ATOMIC_RMW_CMPXCHG]
    assert body[2].imm == MemArg(2, 8)
    with pytest.raises(MalformedError, match="illegal opcode 0xfe 0x4f"):
        read_module(one_func(b"\xfe\x4f\x02\x00\x0b"))


def test_block_type_by_index() -> None:
    types = vec([b"\x60\0\0", b"\x60\x01\x7f\x01\x7e"])
    body = (
        b"\x00" + b"\x41\x01\x02\x01\x1a\x42\x00\x0b\x1a\x0b"
    )  # i32.const 1; block (type 1) drop i64.const 0 end
    data = HEADER + section(1, types) + section(3, vec([b"\0"])) + section(10, vec([leb(len(body)) + body]))
    m = load(data)
    assert m.funcs[0].body[1].imm == BlockType(type_index=1)
    bad = data.replace(b"\x02\x01\x1a", b"\x02\x05\x1a")
    with pytest.raises(WasmError, match="unknown type 5"):
        load(bad)


# ---- robustness: nothing but WasmError ever escapes ----


@pytest.fixture(scope="module")
def rich() -> bytes:
    return compile_c(
        "int g[4]; int f(int x) { int s = 0; for (int i = 0; i < x; i++) s += g[i & 3] * i;"
        " return s; } double h(double d) { return d * 2.5; }"
    )


def test_every_truncation_is_malformed(rich: bytes) -> None:
    accepted = 0
    for n in range(len(rich)):
        try:
            read_module(rich[:n])
            accepted += 1  # only possible exactly at a section boundary
        except MalformedError:
            pass
    assert accepted <= rich.count(b"\x00") and accepted < 20


def test_random_corruption_only_raises_wasm_errors(rich: bytes) -> None:
    rng = random.Random(1234)
    kinds: dict[str, int] = {}
    for _ in range(600):
        data = bytearray(rich)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(8, len(data))] = rng.randrange(256)
        try:
            load(bytes(data))
            kinds["ok"] = kinds.get("ok", 0) + 1
        except WasmError as e:
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
    assert kinds.get("MalformedError") and kinds.get("InvalidError")


def test_float_bits_roundtrip() -> None:
    m = load(wat("(module (func (result f64) (f64.const 3.25)))"))
    (const,) = [i for i in m.funcs[0].body if i.op == Op.F64_CONST]
    assert struct.unpack("<d", const.imm.to_bytes(8, "little"))[0] == 3.25  # type: ignore[attr-defined]
