"""BPF opcode fields (include/uapi/linux/bpf.h, Documentation/bpf/standardization/instruction-set.rst).

An opcode byte is ``class | size/op | mode/source``; these constants are the pieces, the masks that take an
opcode apart, and the whole opcodes that code tests for by value. This is the one module that spells opcode
numbers; everything else composes them from these names.
"""

from enum import IntEnum


class Class(IntEnum):
    LD = 0x00
    LDX = 0x01
    ST = 0x02
    STX = 0x03
    ALU = 0x04
    JMP = 0x05
    JMP32 = 0x06
    ALU64 = 0x07


class Size(IntEnum):
    W = 0x00
    H = 0x08
    B = 0x10
    DW = 0x18


SIZE_BYTES = {Size.B: 1, Size.H: 2, Size.W: 4, Size.DW: 8}
BYTES_SIZE = {1: Size.B, 2: Size.H, 4: Size.W, 8: Size.DW}
# bytes a load or store moves, by the plain int of its size field (``code & SIZE_MASK``): the analyses' hot
# loops index it without constructing a ``Size``
MEM_SIZE: dict[int, int] = {int(k): v for k, v in SIZE_BYTES.items()}


# the fields of an opcode byte
CLASS_MASK = 0x07
SIZE_MASK = 0x18  # loads and stores
MODE_MASK = 0xE0  # loads and stores
OP_MASK = 0xF0  # ALU and jump operations
SRC_MASK = 0x08  # ALU and jumps: Src.K or Src.X


class Mode(IntEnum):
    IMM = 0x00
    ABS = 0x20
    IND = 0x40
    MEM = 0x60
    MEMSX = 0x80
    ATOMIC = 0xC0


class Src(IntEnum):
    K = 0x00
    X = 0x08


class Alu(IntEnum):
    ADD = 0x00
    SUB = 0x10
    MUL = 0x20
    DIV = 0x30
    OR = 0x40
    AND = 0x50
    LSH = 0x60
    RSH = 0x70
    NEG = 0x80
    MOD = 0x90
    XOR = 0xA0
    MOV = 0xB0
    ARSH = 0xC0
    END = 0xD0


class Jmp(IntEnum):
    JA = 0x00
    JEQ = 0x10
    JGT = 0x20
    JGE = 0x30
    JSET = 0x40
    JNE = 0x50
    JSGT = 0x60
    JSGE = 0x70
    CALL = 0x80
    EXIT = 0x90
    JLT = 0xA0
    JLE = 0xB0
    JSLT = 0xC0
    JSLE = 0xD0
    JCOND = 0xE0  # may_goto (src_reg 0)


class Atomic(IntEnum):
    """The imm field of BPF_STX | BPF_ATOMIC."""

    ADD = 0x00
    OR = 0x40
    AND = 0x50
    XOR = 0xA0
    FETCH = 0x01
    XCHG = 0xE0 | 0x01
    CMPXCHG = 0xF0 | 0x01


class Pseudo(IntEnum):
    """src_reg values of ld_imm64 (what the 64-bit immediate means)."""

    NONE = 0
    MAP_FD = 1
    MAP_VALUE = 2
    BTF_ID = 3
    FUNC = 4
    MAP_IDX = 5
    MAP_IDX_VALUE = 6


class CallKind(IntEnum):
    """src_reg values of BPF_JMP | BPF_CALL."""

    HELPER = 0
    BPF = 1  # BPF_PSEUDO_CALL: imm is the relative offset of the callee
    KFUNC = 2  # BPF_PSEUDO_KFUNC_CALL: imm is a vmlinux/module BTF id


# off field of ALU64 MOV X that turns it into addr_space_cast
ADDR_SPACE_CAST = 1

LD_IMM64 = Class.LD | Size.DW | Mode.IMM  # 0x18
CALL = Class.JMP | Jmp.CALL  # 0x85: helper, kfunc or BPF-to-BPF call
CALLX = Class.JMP | Jmp.CALL | Src.X  # 0x8d: call through a register
EXIT = Class.JMP | Jmp.EXIT  # 0x95
GOTOL = Class.JMP32 | Jmp.JA  # 0x06: the long jump, its offset in imm

NUM_REGS = 11  # r0..r10
FP = 10  # r10, the read-only frame pointer
