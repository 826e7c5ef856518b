"""The memory access emitter: wasm loads and stores onto the arena window, and the memory/table instructions.

A guest address is a window offset. ``addr_space_cast`` turns it into an arena pointer the verifier accepts,
and the JIT adds the arena's kernel base, so an access is two instructions. In *checked* mode an access is
first compared against the current memory size (kept on the BPF stack by the region prologue) and traps as
the wasm spec says; in *fast* mode it is not, and an access past committed memory reads zero and drops stores
(the arena's own behaviour). This module is the only place that knows how the window is reached, so a
map-backed window for older kernels is a swap of this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsule.bpf.asm import addr_space_cast, alu, call_kfunc, ja, jmp, ld_imm64, ld_map_fd, ldx, ldxs, mov, st, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import Instr, MemArg, Op, ValType

from . import abi
from .abi import BPF_MEM_BYTES, BPF_RUNTIME, BPF_TEMP, BPF_TEMP2
from .ops import imm_of
from .values import CALLER_SAVED, FRAME, T0, T1, Const, Slot, fits_imm32
from .values import FP as R10

if TYPE_CHECKING:
    from .function import FunctionCompiler

I32, I64, F32, F64 = ValType.I32, ValType.I64, ValType.F32, ValType.F64

# op -> (bytes, signed, result type)
_LOADS = {
    Op.I32_LOAD: (4, False, I32), Op.I64_LOAD: (8, False, I64), Op.F32_LOAD: (4, False, F32),
    Op.F64_LOAD: (8, False, F64), Op.I32_LOAD8_S: (1, True, I32), Op.I32_LOAD8_U: (1, False, I32),
    Op.I32_LOAD16_S: (2, True, I32), Op.I32_LOAD16_U: (2, False, I32), Op.I64_LOAD8_S: (1, True, I64),
    Op.I64_LOAD8_U: (1, False, I64), Op.I64_LOAD16_S: (2, True, I64), Op.I64_LOAD16_U: (2, False, I64),
    Op.I64_LOAD32_S: (4, True, I64), Op.I64_LOAD32_U: (4, False, I64),
}
_STORES = {
    Op.I32_STORE: 4, Op.I64_STORE: 8, Op.F32_STORE: 4, Op.F64_STORE: 8, Op.I32_STORE8: 1, Op.I32_STORE16: 2,
    Op.I64_STORE8: 1, Op.I64_STORE16: 2, Op.I64_STORE32: 4,
}


def lower(fc: FunctionCompiler, i: int, ins: Instr) -> int | None:
    op = ins.op
    if op in _LOADS:
        load(fc, ins.imm, *_LOADS[op])  # type: ignore[arg-type]
    elif op in _STORES:
        store(fc, ins.imm, _STORES[op])  # type: ignore[arg-type]
    elif op == Op.MEMORY_SIZE:
        slot = fc.push(Slot(I32))
        dst = fc.dst(slot)
        fc.emit(ldx(8, dst, R10, BPF_RUNTIME), ldx(8, dst, dst, abi.CTRL_MEM_PAGES))
        fc.finish(slot, dst, I32)
    elif op == Op.MEMORY_GROW:
        grow(fc)
    elif op == Op.MEMORY_FILL:
        bulk(fc, fill=True)
    elif op == Op.MEMORY_COPY:
        bulk(fc, fill=False)
    elif op == Op.TABLE_SIZE:
        slot = fc.push(Slot(I32))
        dst = fc.dst(slot)
        fc.emit(ldx(8, dst, R10, BPF_RUNTIME), ldx(8, dst, dst, abi.CTRL_TABLE0_SIZE + 8 * ins.imm))  # type: ignore[operator]
        fc.finish(slot, dst, I32)
    elif op in (Op.TABLE_GET, Op.TABLE_SET):
        table_access(fc, ins.imm, op == Op.TABLE_SET)  # type: ignore[arg-type]
    else:
        return None
    return i + 1


def address(fc: FunctionCompiler, ra: int, offset: int, size: int) -> tuple[int, int]:
    """Bounds-check (checked mode) and cast the address in ``ra``; returns (pointer register, insn offset).

    Uses T0 for the pointer and, in checked mode, T1 for the limit.
    """
    if fc.opt.checked:
        end = offset + size
        if fits_imm32(end):
            fc.emit(mov(T0, ra), alu(Alu.ADD, T0, end))
        else:
            fc.emit(ld_imm64(T0, end), alu(Alu.ADD, T0, ra))
        fc.emit(ldx(8, T1, R10, BPF_MEM_BYTES), jmp(Jmp.JGT, T0, T1, fc.trap_label(abi.Trap.OUT_OF_BOUNDS)))
        if ra in (T0, T1):  # the sum or the limit overwrote the address: recover it from T0 = address + end
            fc.emit(alu(Alu.SUB, T0, end) if fits_imm32(end) else ld_imm64(T1, end))
            if not fits_imm32(end):
                fc.emit(alu(Alu.SUB, T0, T1))
            ra = T0
    if offset < (1 << 15):
        fc.emit(addr_space_cast(T0, ra, 0, 1))
        return T0, offset
    # the effective address wraps at 32 bits in fast mode (checked mode has trapped before it could)
    fc.emit(mov(T0, ra), alu(Alu.ADD, T0, offset & 0xFFFF_FFFF, w32=True), addr_space_cast(T0, T0, 0, 1))
    return T0, 0


def load(fc: FunctionCompiler, memarg: MemArg, size: int, signed: bool, t: ValType) -> None:
    slot, e = fc.pop()
    fc.push(e)
    ra = fc.read(slot, e, T1)
    if ra == T1:  # the address is needed while T1 holds the limit: move it to the result register first
        dst = fc.dst(slot)
        if dst != T0:
            fc.emit(mov(dst, T1))
            ra = dst
    ptr, off = address(fc, ra, memarg.offset, size)
    dst = fc.dst(slot)
    if signed:
        fc.emit(ldxs(size, dst, ptr, off))
        if t == I32:
            fc.emit(mov(dst, dst, w32=True))
    else:
        fc.emit(ldx(size, dst, ptr, off))
    fc.finish(slot, dst, t)


def store(fc: FunctionCompiler, memarg: MemArg, size: int) -> None:
    vs, v = fc.pop()
    as_, a = fc.pop()
    imm = imm_of(v, size <= 4)
    if imm is not None and size == 8 and not fits_imm32(imm):
        imm = None
    if imm is not None and size <= 4:
        imm &= (1 << (8 * size)) - 1
        if imm >= 1 << 31:
            imm -= 1 << 32
    ra = fc.read(as_, a, T0)
    if ra == T0:  # keep T0 free for the pointer
        fc.emit(stx(8, R10, BPF_TEMP, T0))
    rv = None
    if imm is None and isinstance(v, Slot) and fc.home(vs) is not None:
        rv = fc.home(vs)
    if ra == T0:
        fc.emit(ldx(8, T1, R10, BPF_TEMP))
        ra = T1
        if fc.opt.checked:  # T1 is needed for the limit: park the address in the value's spill slot
            fc.emit(stx(8, FRAME, fc.spill_off(as_), T1))
    if fc.opt.checked and ra == T1:
        fc.emit(ldx(8, T0, FRAME, fc.spill_off(as_)), alu(Alu.ADD, T0, memarg.offset + size)
                if fits_imm32(memarg.offset + size) else ld_imm64(T0, memarg.offset + size))
        if not fits_imm32(memarg.offset + size):
            fc.emit(alu(Alu.ADD, T0, T1))
        fc.emit(ldx(8, T1, R10, BPF_MEM_BYTES), jmp(Jmp.JGT, T0, T1, fc.trap_label(abi.Trap.OUT_OF_BOUNDS)))
        fc.emit(ldx(8, T1, FRAME, fc.spill_off(as_)))
        checked_done = True
    else:
        checked_done = False
    saved_checked = fc.opt.checked
    if checked_done:
        fc.opt = fc.opt.replace(checked=False)
    try:
        ptr, off = address(fc, ra, memarg.offset, size)
    finally:
        fc.opt = fc.opt.replace(checked=saved_checked)
    if imm is not None:
        fc.emit(st(size, ptr, off, imm))
        return
    if rv is None:  # value in memory or a wide constant: T1 is free again now
        rv = fc.read(vs, v, T1)
    fc.emit(stx(size, ptr, off, rv))


def grow(fc: FunctionCompiler) -> None:
    """memory.grow: within the declared maximum; pages past what is committed are allocated with the
    ``bpf_arena_alloc_pages`` kfunc (the entry program is sleepable)."""
    slot, e = fc.pop()
    fc.push(e)
    # the registers of the slots below are saved around the kfunc call: constants must be in them first
    fc.materialize_all_below(slot)
    dst = fc.dst(slot)  # T0 when the slot lives in the frame: the code below keeps to T0/T1 and BPF_TEMP/BPF_TEMP2
    fc.read_into(T0, slot, e)
    fail = fc.code.fresh(f"f{fc.index}.growfail")
    done = fc.code.fresh(f"f{fc.index}.growdone")
    live = frozenset(r for r in fc.stack_regs[:slot] if r in CALLER_SAVED)
    # new pages = old + n (64-bit: no wrap-around), at BPF_TEMP
    fc.emit(ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_MEM_PAGES), alu(Alu.ADD, T0, T1),
            stx(8, R10, BPF_TEMP, T0), ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_MEM_MAX_PAGES),
            jmp(Jmp.JGT, T0, T1, fail))
    # bytes = new pages << 16; allocate [committed, bytes) if needed
    fc.emit(alu(Alu.LSH, T0, 16), ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_COMMITTED))
    have = fc.code.fresh(f"f{fc.index}.growhave")
    fc.emit(jmp(Jmp.JLE, T0, T1, have))
    fc.spill_regs(slot + 1, only=live)
    # the region spills and reloads its caller-saved stack registers around the kfunc call
    from capsule.bpf.asm import R1, R2, R3, R4, R5

    fc.emit(stx(8, R10, BPF_TEMP2, T0))  # new committed size
    fc.emit(ld_map_fd(R1, abi.WINDOW_MAP), ldx(8, R2, R10, BPF_RUNTIME), ldx(8, R2, R2, abi.CTRL_USER_BASE),
            alu(Alu.ADD, R2, T1), mov(R3, T0), alu(Alu.SUB, R3, T1), alu(Alu.RSH, R3, 12),
            mov(R4, -1, w32=True), mov(R5, 0), call_kfunc("bpf_arena_alloc_pages"))
    fc.reload_regs(slot + 1, only=live)
    ok = fc.code.fresh(f"f{fc.index}.growok")
    fc.emit(jmp(Jmp.JNE, T0, 0, ok), ja(fail))
    fc.code.label(ok)
    fc.emit(ldx(8, T0, R10, BPF_TEMP2), ldx(8, T1, R10, BPF_RUNTIME), stx(8, T1, abi.CTRL_COMMITTED, T0))
    fc.code.label(have)
    # commit the new size; the result is the old size
    fc.emit(ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T0, T1, abi.CTRL_MEM_PAGES), stx(8, R10, BPF_TEMP2, T0))
    fc.emit(ldx(8, T0, R10, BPF_TEMP), stx(8, T1, abi.CTRL_MEM_PAGES, T0),
            alu(Alu.LSH, T0, 16), stx(8, T1, abi.CTRL_MEM_BYTES, T0), stx(8, R10, BPF_MEM_BYTES, T0),
            ldx(8, dst, R10, BPF_TEMP2), ja(done))
    fc.code.label(fail)
    fc.emit(mov(dst, 0xFFFF_FFFF, w32=True))
    fc.code.label(done)
    fc.finish(slot, dst, I32)


def bulk(fc: FunctionCompiler, fill: bool) -> None:
    """memory.fill (d, val, n) and memory.copy (d, s, n): bounds-checked as a whole, then a loop of 8-byte and
    1-byte steps that can be suspended by ``may_goto`` and resumed where it stopped (its state is the three
    operand slots, updated in place)."""
    h = len(fc.stack)
    base = h - 3
    for k in range(base, h):
        fc.materialize(k)
    d_s, s_s, n_s = base, base + 1, base + 2
    # check both ranges first, as the spec does: a failing copy writes nothing
    for k in (d_s,) if fill else (d_s, s_s):
        fc.emit(mov(T0, fc.read(k, fc.stack[k], T0)), alu(Alu.ADD, T0, fc.read(n_s, fc.stack[n_s], T1)))
        fc.emit(ldx(8, T1, R10, BPF_MEM_BYTES), jmp(Jmp.JGT, T0, T1, fc.trap_label(abi.Trap.OUT_OF_BOUNDS)))
    region = fc.new_region()
    head = fc.code.fresh(f"f{fc.index}.bulk")
    out = fc.code.fresh(f"f{fc.index}.bulkend")
    # enter through the frame, as a resumed loop does: the three operands become scalars the verifier does
    # not know, so the loop's states converge instead of being walked from constant counts
    fc.spill_regs(h)
    fc.code.label(fc.region_label(region))
    fc.reload_regs(h)
    fc.code.label(head)

    def reg(k: int, temp: int) -> int:
        return fc.read(k, fc.stack[k], temp)

    def put(k: int, r: int) -> None:
        if fc.home(k) is None:
            fc.emit(stx(8, FRAME, fc.spill_off(k), r))

    # one step: 8 bytes when at least 8 remain (and, for a copy, forward or non-overlapping), else 1
    rn = reg(n_s, T1)
    fc.emit(jmp(Jmp.JEQ, rn, 0, out, w32=True))
    step1 = fc.code.fresh(f"f{fc.index}.bulk1")
    fc.emit(jmp(Jmp.JLT, rn, 8, step1, w32=True))
    if not fill:
        # backward copies (d > s, overlapping) go byte by byte from the end
        fc.emit(mov(T0, reg(d_s, T0)), jmp(Jmp.JGT, T0, reg(s_s, T1), step1))
    for width, label in ((8, None), (1, step1)):
        if label is not None:
            fc.code.label(label)
        back = None
        if not fill and width == 1:
            back = fc.code.fresh(f"f{fc.index}.bulkback")
            fc.emit(mov(T0, reg(d_s, T0)), jmp(Jmp.JGT, T0, reg(s_s, T1), back))
        _bulk_step(fc, fill, width, d_s, s_s, n_s, reg, put, backward=False)
        fc.jump_to_head(head, region, h)
        if back is not None:
            fc.code.label(back)
            _bulk_step(fc, fill, 1, d_s, s_s, n_s, reg, put, backward=True)
            fc.jump_to_head(head, region, h)
    fc.code.label(out)
    fc.stack[base:] = []


def _bulk_step(fc, fill, width, d_s, s_s, n_s, reg, put, backward):  # type: ignore[no-untyped-def]
    """Move ``width`` bytes at the front (or, backward, the back) and advance the three slots."""
    rd = reg(d_s, T0)
    if backward:  # the last byte: d + n - 1 and s + n - 1
        fc.emit(mov(T0, rd), alu(Alu.ADD, T0, reg(n_s, T1), w32=True), alu(Alu.SUB, T0, 1, w32=True))
        rd = T0
    fc.emit(addr_space_cast(T0, rd, 0, 1))
    if fill:
        rv = reg(s_s, T1)
        if width == 8:  # replicate the byte
            fc.emit(mov(T1, rv), alu(Alu.AND, T1, 0xFF))
            fc.emit(stx(8, R10, BPF_TEMP, T0), mov(T0, 0x0101_0101), alu(Alu.LSH, T0, 32), alu(Alu.OR, T0, 0x0101_0101),
                    alu(Alu.MUL, T1, T0), ldx(8, T0, R10, BPF_TEMP))
            fc.emit(stx(8, T0, 0, T1))
        else:
            fc.emit(stx(1, T0, 0, rv))
    else:
        fc.emit(stx(8, R10, BPF_TEMP, T0))
        rs = reg(s_s, T1)
        if backward:
            fc.emit(mov(T1, rs), alu(Alu.ADD, T1, reg(n_s, T0), w32=True), alu(Alu.SUB, T1, 1, w32=True))
            rs = T1
        fc.emit(addr_space_cast(T1, rs, 0, 1), ldx(width, T1, T1, 0), ldx(8, T0, R10, BPF_TEMP), stx(width, T0, 0, T1))
    # advance: n -= width; forward: d += width, s += width
    for k, delta in ((n_s, -width),) + (() if backward else ((d_s, width),) + (() if fill else ((s_s, width),))):
        r = fc.home(k)
        if r is not None:
            fc.emit(alu(Alu.ADD, r, delta, w32=True))
        else:
            fc.emit(ldx(8, T0, FRAME, fc.spill_off(k)), alu(Alu.ADD, T0, delta, w32=True))
            put(k, T0)


def table_access(fc: FunctionCompiler, table: int, is_set: bool) -> None:
    if is_set:
        vs, v = fc.pop()
        is_, ix = fc.pop()
    else:
        is_, ix = fc.pop()
        fc.push(ix)
    ri = fc.read(is_, ix, T0)
    fc.emit(mov(T0, ri), ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_TABLE0_SIZE + 8 * table),
            jmp(Jmp.JGE, T0, T1, fc.trap_label(abi.Trap.TABLE_OUT_OF_BOUNDS)))
    fc.emit(alu(Alu.LSH, T0, 3), alu(Alu.ADD, T0, abi.TABLES - abi.RT_BASE + table * abi.TABLE_STRIDE),
            ldx(8, T1, R10, BPF_RUNTIME), alu(Alu.ADD, T1, T0))
    if is_set:
        if isinstance(v, Const):
            fc.emit(st(8, T1, 0, v.bits))
        else:
            fc.emit(mov(T0, T1))
            fc.emit(stx(8, T0, 0, fc.read(vs, v, T1)))
    else:
        dst = fc.dst(is_)
        fc.emit(ldx(8, dst, T1, 0))
        fc.finish(is_, dst, ValType.FUNCREF)
