"""The threads proposal's atomic instructions, on BPF atomics in the arena.

What this kernel's verifier and JIT take on an arena pointer (measured, ``docs/HOOKS.md``): 4- and 8-byte
``add`` (with or without fetch), ``and``/``or``/``xor`` without fetch, ``xchg`` and ``cmpxchg``; the fetching
``and``/``or``/``xor`` are refused ("BPF_ATOMIC stores into R6 arena is not allowed"), and BPF has no 1- or
2-byte atomics. So:

- loads are plain loads (x86-64 and arm64 loads are single-copy atomic; x86 orders them), stores of 4 and 8
  bytes are ``xchg`` (a full barrier, as a sequentially consistent store needs);
- ``rmw.add/sub/xchg/cmpxchg`` of 4 and 8 bytes (``i64.atomic.rmw32.*`` included) are one BPF atomic;
- every other read-modify-write (fetching ``and``/``or``/``xor``, and all 1- and 2-byte ones, stores
  included) is a compare-and-swap loop on the aligned word that holds it, behind ``may_goto``: a loop cut by
  it (another CPU changing the word for that long) traps rather than loop for ever;
- ``atomic.fence`` is a locked add of zero to the BPF stack (a full barrier on x86-64 and arm64);
- ``memory.atomic.notify`` wakes nobody (0: no BPF program can block), ``memory.atomic.wait32/64`` return 1
  ("not-equal") or 2 ("timed-out") at once on a shared memory, and trap on any other, as the proposal says.

Every access checks bounds (in checked mode) and alignment first, trapping as the proposal says. Operands are
first stored to their frame slots, where the loops read them; the effective address is kept in the address
operand's slot.
"""

from __future__ import annotations

from collections.abc import Callable

from capsule.bpf.asm import FP as R10
from capsule.bpf.asm import (
    Reg,
    addr_space_cast,
    alu,
    atomic,
    cmpxchg,
    ja,
    jmp,
    ld_imm64,
    ldx,
    may_goto,
    mov,
    neg,
    st,
    stx,
    xchg,
)
from capsule.bpf.opcodes import Alu, Atomic, Jmp
from capsule.ints import fits_signed
from capsule.wasm import MemArg, Op, ValType

from . import abi
from .abi import BPF_MEM_BYTES, BPF_TEMP, BPF_TEMP2, BPF_TEMP3
from .emit import T0, T1, borrow
from .state import FunctionState, Lowering
from .values import Slot, load_frame, store_frame

I32, I64 = ValType.I32, ValType.I64
_WIDTHS = ((4, I32), (8, I64), (1, I32), (2, I32), (1, I64), (2, I64), (4, I64))  # the opcode order of each op
_OPS = ("add", "sub", "and", "or", "xor", "xchg", "cmpxchg")
_ALU = {"add": Alu.ADD, "sub": Alu.SUB, "and": Alu.AND, "or": Alu.OR, "xor": Alu.XOR}
_LOADS = {Op.I32_ATOMIC_LOAD: (4, I32), Op.I64_ATOMIC_LOAD: (8, I64), Op.I32_ATOMIC_LOAD8_U: (1, I32),
          Op.I32_ATOMIC_LOAD16_U: (2, I32), Op.I64_ATOMIC_LOAD8_U: (1, I64), Op.I64_ATOMIC_LOAD16_U: (2, I64),
          Op.I64_ATOMIC_LOAD32_U: (4, I64)}
_STORES = {Op.I32_ATOMIC_STORE: 4, Op.I64_ATOMIC_STORE: 8, Op.I32_ATOMIC_STORE8: 1, Op.I32_ATOMIC_STORE16: 2,
           Op.I64_ATOMIC_STORE8: 1, Op.I64_ATOMIC_STORE16: 2, Op.I64_ATOMIC_STORE32: 4}


def _operands(fs: FunctionState, n: int) -> int:
    """Put the top ``n`` operands in their frame slots and pop them; returns the first one's slot."""
    h = len(fs.stack)
    base = h - n
    for k in range(base, h):
        fs.stack.materialize(k)
        r = fs.stack.home(k)
        if r is not None:
            fs.emit(store_frame(fs.stack.spill_off(k), r))
    fs.stack.truncate(base)
    return base


def _effective(fs: FunctionState, base: int, memarg: MemArg, size: int) -> None:
    """T0 = the effective address of the access (the address operand is in ``base``'s slot), bounds- and
    alignment-checked; it is also stored back into that slot. Clobbers T1."""
    fs.emit(load_frame(T0, fs.stack.spill_off(base)))
    offset = memarg.offset
    if fs.opt.checked:  # 64-bit sums: no wrap-around hides an access past the end
        end = offset + size
        if fits_signed(end, 32):
            fs.emit(alu(Alu.ADD, T0, end))
        else:
            fs.emit(ld_imm64(T1, end), alu(Alu.ADD, T0, T1))
        fs.emit(ldx(8, T1, R10, BPF_MEM_BYTES), jmp(Jmp.JGT, T0, T1, fs.trap_label(abi.Trap.OUT_OF_BOUNDS)),
                alu(Alu.SUB, T0, size))
    else:
        fs.emit(alu(Alu.ADD, T0, offset & 0xFFFF_FFFF, w32=True), alu(Alu.AND, T0, fs.info.memory_mask, w32=True))
    if size > 1:
        fs.emit(mov(T1, T0), alu(Alu.AND, T1, size - 1), jmp(Jmp.JNE, T1, 0, fs.trap_label(abi.Trap.UNALIGNED_ATOMIC)))
    fs.emit(store_frame(fs.stack.spill_off(base), T0))


def _result(fs: FunctionState, t: ValType, size: int) -> None:
    """Push T0 (the old value, ``size`` bytes) as the instruction's result."""
    slot = fs.stack.push(Slot(t))
    dst = fs.stack.dst(slot)
    if size < 8:
        fs.emit(mov(dst, T0, w32=True))
        if size < 4:
            fs.emit(alu(Alu.AND, dst, (1 << (8 * size)) - 1))
    elif dst != T0:
        fs.emit(mov(dst, T0))
    fs.stack.finish(slot, dst, t)


def load(fs: FunctionState, memarg: MemArg, size: int, t: ValType) -> None:
    base = _operands(fs, 1)
    _effective(fs, base, memarg, size)
    fs.emit(addr_space_cast(T0, T0, 0, 1), ldx(size, T0, T0, 0))
    _result(fs, t, 8)


def store(fs: FunctionState, memarg: MemArg, size: int) -> None:
    base = _operands(fs, 2)
    _effective(fs, base, memarg, size)
    if size >= 4:  # xchg: a store and a full barrier
        fs.emit(addr_space_cast(T1, T0, 0, 1), load_frame(T0, fs.stack.spill_off(base + 1)), xchg(size, T1, 0, T0))
    else:
        _cas_loop(fs, base, size, lambda x: fs.emit(load_frame(x, fs.stack.spill_off(base + 1))))


def rmw(fs: FunctionState, memarg: MemArg, op: str, size: int, t: ValType) -> None:
    nargs = 3 if op == "cmpxchg" else 2
    base = _operands(fs, nargs)
    _effective(fs, base, memarg, size)
    value = fs.stack.spill_off(base + 1)
    if size >= 4 and op in ("add", "sub", "xchg"):
        fs.emit(addr_space_cast(T1, T0, 0, 1), load_frame(T0, value))
        if op == "sub":
            fs.emit(neg(T0))
        fs.emit(xchg(size, T1, 0, T0) if op == "xchg" else atomic(Atomic.ADD, size, T1, 0, T0, fetch=True))
    elif size >= 4 and op == "cmpxchg":
        with borrow(fs, {T0, T1}) as x:
            fs.emit(addr_space_cast(T1, T0, 0, 1), load_frame(x, fs.stack.spill_off(base + 2)),
                    load_frame(T0, value), cmpxchg(size, T1, 0, x))
    elif op == "cmpxchg":
        _cas_loop(fs, base, size, None, expected=value, replacement=fs.stack.spill_off(base + 2))
    else:
        def new(x: Reg) -> None:  # x = the new value of the field, from the old one in T0 and the operand
            fs.emit(load_frame(x, value))
            if op != "xchg":
                fs.emit(alu(_ALU[op], T0, x, w32=size == 4), mov(x, T0))
        _cas_loop(fs, base, size, new)
    _result(fs, t, size)


def _cas_loop(fs: FunctionState, base: int, size: int, new: Callable[[Reg], None] | None, *,
              expected: int | None = None, replacement: int | None = None) -> None:
    """A read-modify-write of ``size`` bytes at the effective address (in ``base``'s slot) as a
    compare-and-swap loop on the word that holds them: the aligned 4 bytes, or the 8 of an 8-byte access.
    ``new(x)`` computes the field's new value into ``x`` from its old value in T0 (zero-extended, shifted
    down; T0 may be clobbered); a cmpxchg (``new`` None) compares the field with the value in frame slot
    ``expected``, and writes the one in ``replacement`` only if they are equal. After it T0 = the field's
    old value. BPF_TEMP holds that, BPF_TEMP2 the old word, BPF_TEMP3 the field's bit position."""
    word = 8 if size == 8 else 4
    narrow = size < word
    mask = (1 << (8 * size)) - 1
    addr = fs.stack.spill_off(base)
    head, done = fs.fresh("cas"), fs.fresh("casdone")
    if narrow:  # the field's bit position in its word, (ea & 3) * 8, for the whole loop
        fs.emit(load_frame(T0, addr), alu(Alu.AND, T0, 3), alu(Alu.LSH, T0, 3), stx(8, R10, BPF_TEMP3, T0))
    with borrow(fs, {T0, T1}) as x:
        fs.code.label(head)
        _word(fs, addr, narrow)
        fs.emit(ldx(word, T0, T1, 0), stx(8, R10, BPF_TEMP2, T0))
        if narrow:
            fs.emit(ldx(8, x, R10, BPF_TEMP3), alu(Alu.RSH, T0, x, w32=True), alu(Alu.AND, T0, mask))
        fs.emit(stx(8, R10, BPF_TEMP, T0))
        if new is None:
            assert expected is not None and replacement is not None
            fs.emit(load_frame(x, expected))
            if narrow:
                fs.emit(alu(Alu.AND, x, mask))
            fs.emit(jmp(Jmp.JNE, T0, x, done, w32=word == 4), load_frame(x, replacement))
        else:
            new(x)
        if narrow:  # x = the old word with the field replaced: (old & ~(mask << at)) | ((x & mask) << at)
            fs.emit(alu(Alu.AND, x, mask), ldx(8, T1, R10, BPF_TEMP3), alu(Alu.LSH, x, T1, w32=True),
                    mov(T0, mask), alu(Alu.LSH, T0, T1, w32=True), alu(Alu.XOR, T0, -1, w32=True),
                    ldx(8, T1, R10, BPF_TEMP2), alu(Alu.AND, T0, T1, w32=True), alu(Alu.OR, x, T0, w32=True))
            _word(fs, addr, narrow)
        fs.emit(ldx(8, T0, R10, BPF_TEMP2), cmpxchg(word, T1, 0, x), ldx(8, x, R10, BPF_TEMP2),
                jmp(Jmp.JEQ, T0, x, done, w32=word == 4), may_goto(fs.trap_label(abi.Trap.ATOMIC_CONTENDED)),
                ja(head))
        fs.code.label(done)
    fs.emit(ldx(8, T0, R10, BPF_TEMP))


def _word(fs: FunctionState, addr: int, narrow: bool) -> None:
    """T1 = a pointer to the word at the effective address in frame slot ``addr`` (its aligned 4 bytes)."""
    fs.emit(load_frame(T1, addr))
    if narrow:
        fs.emit(alu(Alu.AND, T1, -4, w32=True))
    fs.emit(addr_space_cast(T1, T1, 0, 1))


def fence(fs: FunctionState) -> None:
    """A locked add of zero to the BPF stack: x86-64's ``lock add`` and arm64's ``ldaddal`` are full barriers."""
    fs.emit(st(8, R10, BPF_TEMP, 0), mov(T0, 0), atomic(Atomic.ADD, 8, R10, BPF_TEMP, T0))


def notify(fs: FunctionState, memarg: MemArg) -> None:
    base = _operands(fs, 2)
    _effective(fs, base, memarg, 4)
    fs.emit(mov(T0, 0))
    _result(fs, I32, 4)


def wait(fs: FunctionState, memarg: MemArg, size: int) -> None:
    """No BPF program can sleep: the value differs (1, "not-equal") or the wait times out at once (2)."""
    base = _operands(fs, 3)
    mems = fs.m.all_memories()
    if not mems or not mems[0].limits.shared:
        fs.trap(abi.Trap.EXPECTED_SHARED)
        fs.dead = True
        fs.stack.push(Slot(I32))
        return
    _effective(fs, base, memarg, size)
    ne = fs.fresh("waitne")
    fs.emit(addr_space_cast(T0, T0, 0, 1), ldx(size, T0, T0, 0), load_frame(T1, fs.stack.spill_off(base + 1)),
            jmp(Jmp.JNE, T0, T1, ne, w32=size == 4), mov(T0, 2), ja(ne + ".end"))
    fs.code.label(ne)
    fs.emit(mov(T0, 1))
    fs.code.label(ne + ".end")
    _result(fs, I32, 4)


def _load(size: int, t: ValType) -> Lowering:
    return lambda fs, ins: load(fs, ins.imm_as(MemArg), size, t)


def _store(size: int) -> Lowering:
    return lambda fs, ins: store(fs, ins.imm_as(MemArg), size)


def _rmw(name: str, size: int, t: ValType) -> Lowering:
    return lambda fs, ins: rmw(fs, ins.imm_as(MemArg), name, size, t)


def _wait(size: int) -> Lowering:
    return lambda fs, ins: wait(fs, ins.imm_as(MemArg), size)


def _lowerings() -> dict[int, Lowering]:
    table: dict[int, Lowering] = {}
    for op, (size, t) in _LOADS.items():
        table[op] = _load(size, t)
    for op, size in _STORES.items():
        table[op] = _store(size)
    for k, name in enumerate(_OPS):
        for j, (size, t) in enumerate(_WIDTHS):
            table[0xFE1E + 7 * k + j] = _rmw(name, size, t)
    table[Op.ATOMIC_FENCE] = lambda fs, ins: fence(fs)
    table[Op.MEMORY_ATOMIC_NOTIFY] = lambda fs, ins: notify(fs, ins.imm_as(MemArg))
    table[Op.MEMORY_ATOMIC_WAIT32] = _wait(4)
    table[Op.MEMORY_ATOMIC_WAIT64] = _wait(8)
    return table


LOWERINGS: dict[int, Lowering] = _lowerings()
