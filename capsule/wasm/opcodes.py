"""The instruction table: every opcode capsule decodes, its immediates, and (for plain ops) its stack type.

One table drives both the decoder (which immediates follow the opcode) and the validator (what a plain numeric
instruction pops and pushes), so adding an instruction is one line. Opcodes behind the 0xFC prefix get the
value ``0xFC00 | subopcode`` so that every instruction is one ``Op`` member and a compiler can ``match`` on
it.

Stack signatures are written ``params:results`` with one letter per value: ``i`` i32, ``I`` i64, ``f`` f32,
``F`` f64. Instructions whose typing depends on their immediates or on context (control, locals, select,
calls, tables, references) have no signature here; the validator handles them by name.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

from .module import ValType


class Imm(IntEnum):
    """What follows an opcode in the binary, and therefore what ``Instr.imm`` holds."""

    NONE = 0  # imm is None
    BLOCK = 1  # BlockType
    LABEL = 2  # int: relative label depth
    BR_TABLE = 3  # BrTable
    FUNC = 4  # int: function index
    CALL_INDIRECT = 5  # (type index, table index)
    LOCAL = 6  # int: local index
    GLOBAL = 7  # int: global index
    TABLE = 8  # int: table index
    MEMARG = 9  # MemArg
    MEMORY = 10  # int: memory index (always 0: multi-memory is unsupported)
    I32 = 11  # int: signed value
    I64 = 12  # int: signed value
    F32 = 13  # int: raw IEEE-754 bits (unsigned), so NaN payloads survive
    F64 = 14  # int: raw IEEE-754 bits (unsigned)
    SELECT_T = 15  # tuple[ValType, ...]: the types of a typed select
    REFTYPE = 16  # ValType: funcref or externref
    DATA_MEMORY = 17  # (data index, memory index)
    DATA = 18  # int: data segment index
    MEMORY_MEMORY = 19  # (destination memory, source memory)
    ELEM_TABLE = 20  # (element segment index, table index)
    ELEM = 21  # int: element segment index
    TABLE_TABLE = 22  # (destination table, source table)


# (opcode, name, immediate, signature or None). Loads/stores also appear in NATURAL_ALIGN below.
_TABLE: list[tuple[int, str, Imm, str | None]] = [
    (0x00, "unreachable", Imm.NONE, None),
    (0x01, "nop", Imm.NONE, ":"),
    (0x02, "block", Imm.BLOCK, None),
    (0x03, "loop", Imm.BLOCK, None),
    (0x04, "if", Imm.BLOCK, None),
    (0x05, "else", Imm.NONE, None),
    (0x0B, "end", Imm.NONE, None),
    (0x0C, "br", Imm.LABEL, None),
    (0x0D, "br_if", Imm.LABEL, None),
    (0x0E, "br_table", Imm.BR_TABLE, None),
    (0x0F, "return", Imm.NONE, None),
    (0x10, "call", Imm.FUNC, None),
    (0x11, "call_indirect", Imm.CALL_INDIRECT, None),
    (0x1A, "drop", Imm.NONE, None),
    (0x1B, "select", Imm.NONE, None),
    (0x1C, "select_t", Imm.SELECT_T, None),
    (0x20, "local.get", Imm.LOCAL, None),
    (0x21, "local.set", Imm.LOCAL, None),
    (0x22, "local.tee", Imm.LOCAL, None),
    (0x23, "global.get", Imm.GLOBAL, None),
    (0x24, "global.set", Imm.GLOBAL, None),
    (0x25, "table.get", Imm.TABLE, None),
    (0x26, "table.set", Imm.TABLE, None),
    (0x28, "i32.load", Imm.MEMARG, "i:i"),
    (0x29, "i64.load", Imm.MEMARG, "i:I"),
    (0x2A, "f32.load", Imm.MEMARG, "i:f"),
    (0x2B, "f64.load", Imm.MEMARG, "i:F"),
    (0x2C, "i32.load8_s", Imm.MEMARG, "i:i"),
    (0x2D, "i32.load8_u", Imm.MEMARG, "i:i"),
    (0x2E, "i32.load16_s", Imm.MEMARG, "i:i"),
    (0x2F, "i32.load16_u", Imm.MEMARG, "i:i"),
    (0x30, "i64.load8_s", Imm.MEMARG, "i:I"),
    (0x31, "i64.load8_u", Imm.MEMARG, "i:I"),
    (0x32, "i64.load16_s", Imm.MEMARG, "i:I"),
    (0x33, "i64.load16_u", Imm.MEMARG, "i:I"),
    (0x34, "i64.load32_s", Imm.MEMARG, "i:I"),
    (0x35, "i64.load32_u", Imm.MEMARG, "i:I"),
    (0x36, "i32.store", Imm.MEMARG, "ii:"),
    (0x37, "i64.store", Imm.MEMARG, "iI:"),
    (0x38, "f32.store", Imm.MEMARG, "if:"),
    (0x39, "f64.store", Imm.MEMARG, "iF:"),
    (0x3A, "i32.store8", Imm.MEMARG, "ii:"),
    (0x3B, "i32.store16", Imm.MEMARG, "ii:"),
    (0x3C, "i64.store8", Imm.MEMARG, "iI:"),
    (0x3D, "i64.store16", Imm.MEMARG, "iI:"),
    (0x3E, "i64.store32", Imm.MEMARG, "iI:"),
    (0x3F, "memory.size", Imm.MEMORY, ":i"),
    (0x40, "memory.grow", Imm.MEMORY, "i:i"),
    (0x41, "i32.const", Imm.I32, ":i"),
    (0x42, "i64.const", Imm.I64, ":I"),
    (0x43, "f32.const", Imm.F32, ":f"),
    (0x44, "f64.const", Imm.F64, ":F"),
    (0x45, "i32.eqz", Imm.NONE, "i:i"),
    *[
        (0x46 + k, f"i32.{n}", Imm.NONE, "ii:i")
        for k, n in enumerate("eq ne lt_s lt_u gt_s gt_u le_s le_u ge_s ge_u".split())
    ],
    (0x50, "i64.eqz", Imm.NONE, "I:i"),
    *[
        (0x51 + k, f"i64.{n}", Imm.NONE, "II:i")
        for k, n in enumerate("eq ne lt_s lt_u gt_s gt_u le_s le_u ge_s ge_u".split())
    ],
    *[(0x5B + k, f"f32.{n}", Imm.NONE, "ff:i") for k, n in enumerate("eq ne lt gt le ge".split())],
    *[(0x61 + k, f"f64.{n}", Imm.NONE, "FF:i") for k, n in enumerate("eq ne lt gt le ge".split())],
    *[(0x67 + k, f"i32.{n}", Imm.NONE, "i:i") for k, n in enumerate("clz ctz popcnt".split())],
    *[
        (0x6A + k, f"i32.{n}", Imm.NONE, "ii:i")
        for k, n in enumerate(
            "add sub mul div_s div_u rem_s rem_u and or xor shl shr_s shr_u rotl rotr".split()
        )
    ],
    *[(0x79 + k, f"i64.{n}", Imm.NONE, "I:I") for k, n in enumerate("clz ctz popcnt".split())],
    *[
        (0x7C + k, f"i64.{n}", Imm.NONE, "II:I")
        for k, n in enumerate(
            "add sub mul div_s div_u rem_s rem_u and or xor shl shr_s shr_u rotl rotr".split()
        )
    ],
    *[
        (0x8B + k, f"f32.{n}", Imm.NONE, "f:f")
        for k, n in enumerate("abs neg ceil floor trunc nearest sqrt".split())
    ],
    *[
        (0x92 + k, f"f32.{n}", Imm.NONE, "ff:f")
        for k, n in enumerate("add sub mul div min max copysign".split())
    ],
    *[
        (0x99 + k, f"f64.{n}", Imm.NONE, "F:F")
        for k, n in enumerate("abs neg ceil floor trunc nearest sqrt".split())
    ],
    *[
        (0xA0 + k, f"f64.{n}", Imm.NONE, "FF:F")
        for k, n in enumerate("add sub mul div min max copysign".split())
    ],
    (0xA7, "i32.wrap_i64", Imm.NONE, "I:i"),
    (0xA8, "i32.trunc_f32_s", Imm.NONE, "f:i"),
    (0xA9, "i32.trunc_f32_u", Imm.NONE, "f:i"),
    (0xAA, "i32.trunc_f64_s", Imm.NONE, "F:i"),
    (0xAB, "i32.trunc_f64_u", Imm.NONE, "F:i"),
    (0xAC, "i64.extend_i32_s", Imm.NONE, "i:I"),
    (0xAD, "i64.extend_i32_u", Imm.NONE, "i:I"),
    (0xAE, "i64.trunc_f32_s", Imm.NONE, "f:I"),
    (0xAF, "i64.trunc_f32_u", Imm.NONE, "f:I"),
    (0xB0, "i64.trunc_f64_s", Imm.NONE, "F:I"),
    (0xB1, "i64.trunc_f64_u", Imm.NONE, "F:I"),
    (0xB2, "f32.convert_i32_s", Imm.NONE, "i:f"),
    (0xB3, "f32.convert_i32_u", Imm.NONE, "i:f"),
    (0xB4, "f32.convert_i64_s", Imm.NONE, "I:f"),
    (0xB5, "f32.convert_i64_u", Imm.NONE, "I:f"),
    (0xB6, "f32.demote_f64", Imm.NONE, "F:f"),
    (0xB7, "f64.convert_i32_s", Imm.NONE, "i:F"),
    (0xB8, "f64.convert_i32_u", Imm.NONE, "i:F"),
    (0xB9, "f64.convert_i64_s", Imm.NONE, "I:F"),
    (0xBA, "f64.convert_i64_u", Imm.NONE, "I:F"),
    (0xBB, "f64.promote_f32", Imm.NONE, "f:F"),
    (0xBC, "i32.reinterpret_f32", Imm.NONE, "f:i"),
    (0xBD, "i64.reinterpret_f64", Imm.NONE, "F:I"),
    (0xBE, "f32.reinterpret_i32", Imm.NONE, "i:f"),
    (0xBF, "f64.reinterpret_i64", Imm.NONE, "I:F"),
    (0xC0, "i32.extend8_s", Imm.NONE, "i:i"),
    (0xC1, "i32.extend16_s", Imm.NONE, "i:i"),
    (0xC2, "i64.extend8_s", Imm.NONE, "I:I"),
    (0xC3, "i64.extend16_s", Imm.NONE, "I:I"),
    (0xC4, "i64.extend32_s", Imm.NONE, "I:I"),
    (0xD0, "ref.null", Imm.REFTYPE, None),
    (0xD1, "ref.is_null", Imm.NONE, None),
    (0xD2, "ref.func", Imm.FUNC, None),
    (0xFC00, "i32.trunc_sat_f32_s", Imm.NONE, "f:i"),
    (0xFC01, "i32.trunc_sat_f32_u", Imm.NONE, "f:i"),
    (0xFC02, "i32.trunc_sat_f64_s", Imm.NONE, "F:i"),
    (0xFC03, "i32.trunc_sat_f64_u", Imm.NONE, "F:i"),
    (0xFC04, "i64.trunc_sat_f32_s", Imm.NONE, "f:I"),
    (0xFC05, "i64.trunc_sat_f32_u", Imm.NONE, "f:I"),
    (0xFC06, "i64.trunc_sat_f64_s", Imm.NONE, "F:I"),
    (0xFC07, "i64.trunc_sat_f64_u", Imm.NONE, "F:I"),
    (0xFC08, "memory.init", Imm.DATA_MEMORY, "iii:"),
    (0xFC09, "data.drop", Imm.DATA, ":"),
    (0xFC0A, "memory.copy", Imm.MEMORY_MEMORY, "iii:"),
    (0xFC0B, "memory.fill", Imm.MEMORY, "iii:"),
    (0xFC0C, "table.init", Imm.ELEM_TABLE, "iii:"),
    (0xFC0D, "elem.drop", Imm.ELEM, ":"),
    (0xFC0E, "table.copy", Imm.TABLE_TABLE, "iii:"),
    (0xFC0F, "table.grow", Imm.TABLE, None),
    (0xFC10, "table.size", Imm.TABLE, ":i"),
    (0xFC11, "table.fill", Imm.TABLE, None),
]

#: Every decoded instruction's opcode; members are named like ``I32_ADD``; ``op_name`` gives ``"i32.add"``.
if not TYPE_CHECKING:
    Op = IntEnum("Op", [(name.upper().replace(".", "_"), code) for code, name, _, _ in _TABLE])
else:
    # What a type checker sees: the members that the table creates, spelled out, since a checker cannot run the
    # table. tests/wasm/test_opcodes.py fails when this declaration and the table disagree.
    class Op(IntEnum):
        UNREACHABLE = 0x00
        NOP = 0x01
        BLOCK = 0x02
        LOOP = 0x03
        IF = 0x04
        ELSE = 0x05
        END = 0x0B
        BR = 0x0C
        BR_IF = 0x0D
        BR_TABLE = 0x0E
        RETURN = 0x0F
        CALL = 0x10
        CALL_INDIRECT = 0x11
        DROP = 0x1A
        SELECT = 0x1B
        SELECT_T = 0x1C
        LOCAL_GET = 0x20
        LOCAL_SET = 0x21
        LOCAL_TEE = 0x22
        GLOBAL_GET = 0x23
        GLOBAL_SET = 0x24
        TABLE_GET = 0x25
        TABLE_SET = 0x26
        I32_LOAD = 0x28
        I64_LOAD = 0x29
        F32_LOAD = 0x2A
        F64_LOAD = 0x2B
        I32_LOAD8_S = 0x2C
        I32_LOAD8_U = 0x2D
        I32_LOAD16_S = 0x2E
        I32_LOAD16_U = 0x2F
        I64_LOAD8_S = 0x30
        I64_LOAD8_U = 0x31
        I64_LOAD16_S = 0x32
        I64_LOAD16_U = 0x33
        I64_LOAD32_S = 0x34
        I64_LOAD32_U = 0x35
        I32_STORE = 0x36
        I64_STORE = 0x37
        F32_STORE = 0x38
        F64_STORE = 0x39
        I32_STORE8 = 0x3A
        I32_STORE16 = 0x3B
        I64_STORE8 = 0x3C
        I64_STORE16 = 0x3D
        I64_STORE32 = 0x3E
        MEMORY_SIZE = 0x3F
        MEMORY_GROW = 0x40
        I32_CONST = 0x41
        I64_CONST = 0x42
        F32_CONST = 0x43
        F64_CONST = 0x44
        I32_EQZ = 0x45
        I32_EQ = 0x46
        I32_NE = 0x47
        I32_LT_S = 0x48
        I32_LT_U = 0x49
        I32_GT_S = 0x4A
        I32_GT_U = 0x4B
        I32_LE_S = 0x4C
        I32_LE_U = 0x4D
        I32_GE_S = 0x4E
        I32_GE_U = 0x4F
        I64_EQZ = 0x50
        I64_EQ = 0x51
        I64_NE = 0x52
        I64_LT_S = 0x53
        I64_LT_U = 0x54
        I64_GT_S = 0x55
        I64_GT_U = 0x56
        I64_LE_S = 0x57
        I64_LE_U = 0x58
        I64_GE_S = 0x59
        I64_GE_U = 0x5A
        F32_EQ = 0x5B
        F32_NE = 0x5C
        F32_LT = 0x5D
        F32_GT = 0x5E
        F32_LE = 0x5F
        F32_GE = 0x60
        F64_EQ = 0x61
        F64_NE = 0x62
        F64_LT = 0x63
        F64_GT = 0x64
        F64_LE = 0x65
        F64_GE = 0x66
        I32_CLZ = 0x67
        I32_CTZ = 0x68
        I32_POPCNT = 0x69
        I32_ADD = 0x6A
        I32_SUB = 0x6B
        I32_MUL = 0x6C
        I32_DIV_S = 0x6D
        I32_DIV_U = 0x6E
        I32_REM_S = 0x6F
        I32_REM_U = 0x70
        I32_AND = 0x71
        I32_OR = 0x72
        I32_XOR = 0x73
        I32_SHL = 0x74
        I32_SHR_S = 0x75
        I32_SHR_U = 0x76
        I32_ROTL = 0x77
        I32_ROTR = 0x78
        I64_CLZ = 0x79
        I64_CTZ = 0x7A
        I64_POPCNT = 0x7B
        I64_ADD = 0x7C
        I64_SUB = 0x7D
        I64_MUL = 0x7E
        I64_DIV_S = 0x7F
        I64_DIV_U = 0x80
        I64_REM_S = 0x81
        I64_REM_U = 0x82
        I64_AND = 0x83
        I64_OR = 0x84
        I64_XOR = 0x85
        I64_SHL = 0x86
        I64_SHR_S = 0x87
        I64_SHR_U = 0x88
        I64_ROTL = 0x89
        I64_ROTR = 0x8A
        F32_ABS = 0x8B
        F32_NEG = 0x8C
        F32_CEIL = 0x8D
        F32_FLOOR = 0x8E
        F32_TRUNC = 0x8F
        F32_NEAREST = 0x90
        F32_SQRT = 0x91
        F32_ADD = 0x92
        F32_SUB = 0x93
        F32_MUL = 0x94
        F32_DIV = 0x95
        F32_MIN = 0x96
        F32_MAX = 0x97
        F32_COPYSIGN = 0x98
        F64_ABS = 0x99
        F64_NEG = 0x9A
        F64_CEIL = 0x9B
        F64_FLOOR = 0x9C
        F64_TRUNC = 0x9D
        F64_NEAREST = 0x9E
        F64_SQRT = 0x9F
        F64_ADD = 0xA0
        F64_SUB = 0xA1
        F64_MUL = 0xA2
        F64_DIV = 0xA3
        F64_MIN = 0xA4
        F64_MAX = 0xA5
        F64_COPYSIGN = 0xA6
        I32_WRAP_I64 = 0xA7
        I32_TRUNC_F32_S = 0xA8
        I32_TRUNC_F32_U = 0xA9
        I32_TRUNC_F64_S = 0xAA
        I32_TRUNC_F64_U = 0xAB
        I64_EXTEND_I32_S = 0xAC
        I64_EXTEND_I32_U = 0xAD
        I64_TRUNC_F32_S = 0xAE
        I64_TRUNC_F32_U = 0xAF
        I64_TRUNC_F64_S = 0xB0
        I64_TRUNC_F64_U = 0xB1
        F32_CONVERT_I32_S = 0xB2
        F32_CONVERT_I32_U = 0xB3
        F32_CONVERT_I64_S = 0xB4
        F32_CONVERT_I64_U = 0xB5
        F32_DEMOTE_F64 = 0xB6
        F64_CONVERT_I32_S = 0xB7
        F64_CONVERT_I32_U = 0xB8
        F64_CONVERT_I64_S = 0xB9
        F64_CONVERT_I64_U = 0xBA
        F64_PROMOTE_F32 = 0xBB
        I32_REINTERPRET_F32 = 0xBC
        I64_REINTERPRET_F64 = 0xBD
        F32_REINTERPRET_I32 = 0xBE
        F64_REINTERPRET_I64 = 0xBF
        I32_EXTEND8_S = 0xC0
        I32_EXTEND16_S = 0xC1
        I64_EXTEND8_S = 0xC2
        I64_EXTEND16_S = 0xC3
        I64_EXTEND32_S = 0xC4
        REF_NULL = 0xD0
        REF_IS_NULL = 0xD1
        REF_FUNC = 0xD2
        I32_TRUNC_SAT_F32_S = 0xFC00
        I32_TRUNC_SAT_F32_U = 0xFC01
        I32_TRUNC_SAT_F64_S = 0xFC02
        I32_TRUNC_SAT_F64_U = 0xFC03
        I64_TRUNC_SAT_F32_S = 0xFC04
        I64_TRUNC_SAT_F32_U = 0xFC05
        I64_TRUNC_SAT_F64_S = 0xFC06
        I64_TRUNC_SAT_F64_U = 0xFC07
        MEMORY_INIT = 0xFC08
        DATA_DROP = 0xFC09
        MEMORY_COPY = 0xFC0A
        MEMORY_FILL = 0xFC0B
        TABLE_INIT = 0xFC0C
        ELEM_DROP = 0xFC0D
        TABLE_COPY = 0xFC0E
        TABLE_GROW = 0xFC0F
        TABLE_SIZE = 0xFC10
        TABLE_FILL = 0xFC11

_NAMES: dict[int, str] = {code: name for code, name, _, _ in _TABLE}
_NAMES[0x1C] = "select"
#: Opcode -> kind of immediate that follows it.
IMMEDIATE: dict[int, Imm] = {code: imm for code, _, imm, _ in _TABLE}

_LETTER = {"i": ValType.I32, "I": ValType.I64, "f": ValType.F32, "F": ValType.F64}
#: Opcode -> (popped types, pushed types) for instructions whose typing is fixed.
SIGNATURE: dict[int, tuple[tuple[ValType, ...], tuple[ValType, ...]]] = {
    code: (tuple(_LETTER[c] for c in sig.split(":")[0]), tuple(_LETTER[c] for c in sig.split(":")[1]))
    for code, _, _, sig in _TABLE
    if sig is not None
}

#: Loads and stores -> log2 of their access width (the largest alignment exponent allowed).
NATURAL_ALIGN: dict[int, int] = {
    0x28: 2,
    0x29: 3,
    0x2A: 2,
    0x2B: 3,
    0x2C: 0,
    0x2D: 0,
    0x2E: 1,
    0x2F: 1,
    0x30: 0,
    0x31: 0,
    0x32: 1,
    0x33: 1,
    0x34: 2,
    0x35: 2,
    0x36: 2,
    0x37: 3,
    0x38: 2,
    0x39: 3,
    0x3A: 0,
    0x3B: 1,
    0x3C: 0,
    0x3D: 1,
    0x3E: 2,
}

#: Opcodes of proposals capsule does not implement, with the proposal's name (for UnsupportedError).
UNSUPPORTED: dict[int, str] = {
    0x06: "exception handling (try)",
    0x07: "exception handling (catch)",
    0x08: "exception handling (throw)",
    0x09: "exception handling (rethrow)",
    0x0A: "exception handling (throw_ref)",
    0x12: "tail calls (return_call)",
    0x13: "tail calls (return_call_indirect)",
    0x14: "typed function references (call_ref)",
    0x15: "typed function references (return_call_ref)",
    0x18: "exception handling (delegate)",
    0x19: "exception handling (catch_all)",
    0x1F: "exception handling (try_table)",
    0xD3: "typed function references (ref.eq)",
    0xD4: "typed function references (ref.as_non_null)",
    0xD5: "typed function references (br_on_null)",
    0xD6: "typed function references (br_on_non_null)",
    0xFB: "garbage collection (0xFB prefix)",
    0xFD: "SIMD (0xFD prefix)",
    0xFE: "threads (0xFE prefix)",
}


def op_name(code: int) -> str:
    """The text-format name of an opcode (``"i32.add"``), or a hex spelling for unknown ones."""
    name = _NAMES.get(code)
    if name is not None:
        return name
    return f"0xfc {code & 0xFF:#x}" if code >= 0xFC00 else f"opcode {code:#04x}"
