"""The memory access emitter: wasm loads and stores onto the window, and the other memory instructions
(size, grow, fill, copy).

A guest address is a window offset. On the arena, ``addr_space_cast`` turns it into an arena pointer the
verifier accepts, and the JIT adds the arena's kernel base, so an access is two instructions. On the map tier
(``window``: kernels without arena) the address is masked to the memory piece and added to the piece's
address: four instructions and the access. In *checked* mode an access is first compared against the current
memory size (kept on the BPF stack by the region prologue) and traps as the wasm spec says; in *fast* mode it
is not, and an access past committed memory reads zero and drops stores (the arena's own behaviour; on the map
tier it lands in the piece's unused bytes). The tier is chosen here (``_pointer``) and in ``window``, nowhere
else.
"""

from __future__ import annotations

from collections.abc import Callable

from capsule.bpf.asm import FP as R10
from capsule.bpf.asm import (
    Reg,
    addr_space_cast,
    alu,
    ja,
    jmp,
    ld_imm64,
    ldx,
    ldxs,
    mov,
    st,
    stx,
)
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Jmp
from capsule.ints import fits_signed, signed, unsigned
from capsule.wasm import MemArg, Op, ValType

from . import abi
from .abi import BPF_FIBER, BPF_MEM_BYTES, BPF_RUNTIME, BPF_TEMP, BPF_TEMP2
from .control import jump_to_head
from .emit import T0, T1, imm_of
from .state import FunctionState, Lowering
from .values import Slot, load_frame, store_frame

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


def address(fs: FunctionState, ra: Reg, offset: int, size: int, *, check: bool) -> tuple[Reg, int]:
    """Bounds-check (with ``check``) and cast the address in ``ra``; returns (pointer register, insn offset).
    In fast mode the pointer is masked (``abi.fast_mask``), so that no access reaches the runtime area.

    The check is ``ra > limit - end`` (signed, ``_check``): three instructions that leave ``ra`` in place.
    Uses T0 for the pointer and, when checking, the other temporary for the limit.
    """
    mask = [] if fs.opt.checked else [alu(Alu.AND, T0, fs.info.memory_mask, w32=True)]
    if check:
        end = offset + size
        if fits_signed(-end, 32):
            _check(fs, ra, end)
        else:  # an offset of 2 GiB or more: the sum, compared unsigned
            _check_wide(fs, ra, end)
            if ra in (T0, T1):  # the sum or the limit overwrote the address: recover it from T0 = address + end
                fs.emit(ld_imm64(T1, end), alu(Alu.SUB, T0, T1))
                ra = T0
    win = fs.info.window
    if win.is_map:
        return _map_pointer(fs, ra, offset)
    if offset < (1 << 15):
        fs.emit(addr_space_cast(T0, ra, 0, 1), *mask)
        return T0, offset
    # the effective address wraps at 32 bits in fast mode (checked mode has trapped before it could)
    fs.emit(mov(T0, ra), alu(Alu.ADD, T0, unsigned(offset, 32), w32=True), addr_space_cast(T0, T0, 0, 1), *mask)
    return T0, 0


def _check(fs: FunctionState, ra: Reg, end: int) -> None:
    """Trap unless ``ra + end <= limit``, as ``ra > limit - end`` in a temporary that is not ``ra``. Signed,
    because ``limit - end`` is negative when the memory is smaller than ``end`` (every address must trap then);
    ``ra`` is a zero-extended i32 (wasm has no 64-bit memories here), so the comparison is exact."""
    lim = T0 if ra == T1 else T1
    fs.emit(ldx(8, lim, R10, BPF_MEM_BYTES), alu(Alu.ADD, lim, -end),
            jmp(Jmp.JSGT, ra, lim, fs.trap_label(abi.Trap.OUT_OF_BOUNDS)))


def _check_wide(fs: FunctionState, ra: Reg, end: int) -> None:
    """The check for an ``end`` past 2 GiB: T0 = ra + end (64-bit: no wrap-around), compared with the limit."""
    if ra == T0:
        fs.emit(ld_imm64(T1, end), alu(Alu.ADD, T0, T1))
    else:
        fs.emit(ld_imm64(T0, end), alu(Alu.ADD, T0, ra))
    fs.emit(ldx(8, T1, R10, BPF_MEM_BYTES), jmp(Jmp.JGT, T0, T1, fs.trap_label(abi.Trap.OUT_OF_BOUNDS)))


def _map_pointer(fs: FunctionState, ra: Reg, offset: int) -> tuple[Reg, int]:
    """The map tier's pointer in T0 (T1 clobbered): the address, masked to the piece (and in fast mode to the
    memory's mask), plus the piece's address; a large offset is added first, wrapping at 32 bits."""
    mask = abi.GIB4 - 1 if fs.opt.checked else fs.info.memory_mask
    fs.emit(mov(T0, ra, w32=True))
    if offset >= (1 << 15):
        fs.emit(alu(Alu.ADD, T0, unsigned(offset, 32), w32=True))
        offset = 0
    fs.emit(*fs.info.window.masked_pointer(T0, mask, T1))
    return T0, offset


def load(fs: FunctionState, memarg: MemArg, size: int, sign_extend: bool, t: ValType) -> None:
    slot, e = fs.stack.pop()
    fs.stack.push(e)
    ra = fs.stack.read(slot, e, T1, consume=True)
    ptr, off = address(fs, ra, memarg.offset, size, check=fs.opt.checked)
    dst = fs.stack.dst(slot)
    if sign_extend and fs.opt.cpu < 4:  # cpu v3: load, then shift the sign bit to the top and back
        fs.emit(ldx(size, dst, ptr, off), alu(Alu.LSH, dst, 64 - 8 * size), alu(Alu.ARSH, dst, 64 - 8 * size))
        if t == I32:
            fs.emit(mov(dst, dst, w32=True))
    elif sign_extend:
        fs.emit(ldxs(size, dst, ptr, off))
        if t == I32:
            fs.emit(mov(dst, dst, w32=True))
    else:
        fs.emit(ldx(size, dst, ptr, off))
    fs.stack.finish(slot, dst, t)


def store(fs: FunctionState, memarg: MemArg, size: int) -> None:
    vs, v = fs.stack.pop()
    as_, a = fs.stack.pop()
    imm = imm_of(v, size <= 4)
    if imm is not None and size <= 4:  # the bytes stored, as st's sign-extended 32-bit immediate
        imm = signed(unsigned(imm, 8 * size), 32)
    ra = fs.stack.read(as_, a, T0, consume=True)
    rv: Reg | None = None
    if imm is None:
        rv = fs.stack.register_of(vs, v)
    ptr, off = address(fs, ra, memarg.offset, size, check=fs.opt.checked)
    if imm is not None:
        fs.emit(st(size, ptr, off, imm))
        return
    if rv is None:  # value in memory or a wide constant: T1 is free again now
        rv = fs.stack.read(vs, v, T1)
    fs.emit(stx(size, ptr, off, rv))


def grow(fs: FunctionState) -> None:
    """memory.grow: within the declared maximum, and within the pages the host has backed. The entry program is
    not sleepable, so it cannot allocate arena pages itself: a grow past what is committed leaves the region
    (status GROW, the bytes needed in ``FIBER_GROW``), the host backs the pages, and the grow is tried again in a
    region of its own; if the pages are still not there, it fails (-1) as a grow past the maximum does."""
    slot, e = fs.stack.pop()
    fs.stack.push(e)
    fs.stack.materialize(slot)  # the delta is read again after the host round trip: it must be in its slot
    fs.stack.materialize_below(slot)
    dst = fs.stack.dst(slot)  # T0 when the slot lives in the frame: the code below keeps to T0/T1 and BPF_TEMP*
    fail, done, have = fs.fresh("growfail"), fs.fresh("growdone"), fs.fresh("growhave")
    request = fs.fresh("growreq")
    _grow_check(fs, slot, fail, have, request)
    # ask the host for the pages, then check again from the top (a region: everything through the frame)
    fs.code.label(request)
    height = slot + 1
    fs.stack.spill_regs(height)
    retry = fs.new_region()
    fs.emit(ldx(8, T1, R10, BPF_FIBER), stx(8, T1, abi.FIBER_GROW, T0))
    fs.leave_for(retry, abi.SPECIAL_GROW)
    fs.code.label(retry.label)
    fs.stack.reload_regs(height)
    _grow_check(fs, slot, fail, have, fail)
    fs.code.label(have)
    # commit the new size; the result is the old size
    fs.emit(ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T0, T1, abi.CTRL_MEM_PAGES), stx(8, R10, BPF_TEMP2, T0))
    fs.emit(ldx(8, T0, R10, BPF_TEMP), stx(8, T1, abi.CTRL_MEM_PAGES, T0),
            alu(Alu.LSH, T0, 16), stx(8, T1, abi.CTRL_MEM_BYTES, T0), stx(8, R10, BPF_MEM_BYTES, T0),
            ldx(8, dst, R10, BPF_TEMP2), ja(done))
    fs.code.label(fail)
    fs.emit(mov(dst, 0xFFFF_FFFF, w32=True))
    fs.code.label(done)
    fs.stack.finish(slot, dst, I32)


def _grow_check(fs: FunctionState, slot: int, fail: str, have: str, missing: str) -> None:
    """New page count (old + delta, 64-bit: no wrap-around) at BPF_TEMP, failing past the maximum; then to
    ``have`` if its bytes are committed, else to ``missing`` with the bytes in T0."""
    fs.stack.read_into(T0, slot, fs.stack[slot])
    fs.emit(ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_MEM_PAGES), alu(Alu.ADD, T0, T1),
            stx(8, R10, BPF_TEMP, T0), ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_MEM_MAX_PAGES),
            jmp(Jmp.JGT, T0, T1, fail))
    fs.emit(alu(Alu.LSH, T0, 16), ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_COMMITTED),
            jmp(Jmp.JLE, T0, T1, have), ja(missing))


def bulk(fs: FunctionState, fill: bool) -> None:
    """memory.fill (d, val, n) and memory.copy (d, s, n): bounds-checked as a whole, then a loop of 8-byte and
    1-byte steps that can be suspended by ``may_goto`` and resumed where it stopped (its state is the three
    operand slots, updated in place)."""
    h = len(fs.stack)
    base = h - 3
    for k in range(base, h):
        fs.stack.materialize(k)
    d_s, s_s, n_s = base, base + 1, base + 2
    # check both ranges first, as the spec does: a failing copy writes nothing
    for k in (d_s,) if fill else (d_s, s_s):
        fs.emit(mov(T0, fs.stack.read(k, fs.stack[k], T0)),
                alu(Alu.ADD, T0, fs.stack.read(n_s, fs.stack[n_s], T1)))
        fs.emit(ldx(8, T1, R10, BPF_MEM_BYTES), jmp(Jmp.JGT, T0, T1, fs.trap_label(abi.Trap.OUT_OF_BOUNDS)))
    region = fs.new_region()
    head = fs.fresh("bulk")
    out = fs.fresh("bulkend")
    # enter through the frame, as a resumed loop does: the three operands become scalars the verifier does
    # not know, so the loop's states converge instead of being walked from constant counts
    fs.stack.spill_regs(h)
    fs.code.label(region.label)
    fs.stack.reload_regs(h)
    fs.code.label(head)

    def reg(k: int, temp: Reg) -> Reg:
        return fs.stack.read(k, fs.stack[k], temp)

    # one step: 8 bytes when at least 8 remain (and, for a copy, forward or non-overlapping), else 1
    rn = reg(n_s, T1)
    fs.emit(jmp(Jmp.JEQ, rn, 0, out, w32=True))
    step1 = fs.fresh("bulk1")
    fs.emit(jmp(Jmp.JLT, rn, 8, step1, w32=True))
    if not fill:
        # backward copies (d > s, overlapping) go byte by byte from the end
        fs.emit(mov(T0, reg(d_s, T0)), jmp(Jmp.JGT, T0, reg(s_s, T1), step1))
    for width, label in ((8, None), (1, step1)):
        if label is not None:
            fs.code.label(label)
        back = None
        if not fill and width == 1:
            back = fs.fresh("bulkback")
            fs.emit(mov(T0, reg(d_s, T0)), jmp(Jmp.JGT, T0, reg(s_s, T1), back))
        _bulk_step(fs, fill, width, (d_s, s_s, n_s), reg, backward=False)
        if width == 1:
            _forget(fs, (d_s, s_s, n_s))
        jump_to_head(fs, head, region, h)
        if back is not None:
            fs.code.label(back)
            _bulk_step(fs, fill, 1, (d_s, s_s, n_s), reg, backward=True)
            _forget(fs, (d_s, s_s, n_s))
            jump_to_head(fs, head, region, h)
    fs.code.label(out)
    fs.stack.truncate(base)


def _forget(fs: FunctionState, slots: tuple[int, ...]) -> None:
    """A byte step's operands go through the frame before the back-edge. Below 8 bytes the verifier knows the
    count exactly (the ``n < 8`` test after an 8-byte step narrows it, ``n == 0`` marks it precise), and
    states of distinct constant counts never prune: it walked every byte of every copy, with the ``d > s``
    tests adding ever narrower ranges of the two addresses, about 5,500 instructions per ``memory.copy``, and
    a module of 200 bulk operations was "too large" (fuzz seed 2027, input 2009). Reloaded from the arena
    they are scalars it knows nothing about, and the loop converges."""
    for k in slots:
        r = fs.stack.home(k)
        if r is not None:
            fs.emit(store_frame(fs.stack.spill_off(k), r), load_frame(r, fs.stack.spill_off(k)))


def _bulk_step(fs: FunctionState, fill: bool, width: int, slots: tuple[int, int, int],
               reg: Callable[[int, Reg], Reg], *, backward: bool) -> None:
    """Move ``width`` bytes at the front (or, backward, the back) and advance the three slots."""
    d_s, s_s, n_s = slots
    rd = reg(d_s, T0)
    if backward:  # the last byte: d + n - 1 and s + n - 1
        fs.emit(mov(T0, rd), alu(Alu.ADD, T0, reg(n_s, T1), w32=True), alu(Alu.SUB, T0, 1, w32=True))
        rd = T0
    fs.emit(*_bulk_pointer(fs, T0, rd, T1))
    if fill:
        rv = reg(s_s, T1)
        if width == 8:  # replicate the byte
            fs.emit(mov(T1, rv), alu(Alu.AND, T1, 0xFF))
            fs.emit(stx(8, R10, BPF_TEMP, T0), mov(T0, 0x0101_0101), alu(Alu.LSH, T0, 32),
                    alu(Alu.OR, T0, 0x0101_0101), alu(Alu.MUL, T1, T0), ldx(8, T0, R10, BPF_TEMP))
            fs.emit(stx(8, T0, 0, T1))
        else:
            fs.emit(stx(1, T0, 0, rv))
    else:
        fs.emit(stx(8, R10, BPF_TEMP, T0))
        rs = reg(s_s, T1)
        if backward:
            fs.emit(mov(T1, rs), alu(Alu.ADD, T1, reg(n_s, T0), w32=True), alu(Alu.SUB, T1, 1, w32=True))
            rs = T1
        fs.emit(*_bulk_pointer(fs, T1, rs, T0), ldx(width, T1, T1, 0), ldx(8, T0, R10, BPF_TEMP),
                stx(width, T0, 0, T1))
    # advance: n -= width; forward: d += width, s += width
    for k, delta in ((n_s, -width),) + (() if backward else ((d_s, width),) + (() if fill else ((s_s, width),))):
        r = fs.stack.home(k)
        if r is not None:
            fs.emit(alu(Alu.ADD, r, delta, w32=True))
        else:
            fs.emit(load_frame(T0, fs.stack.spill_off(k)), alu(Alu.ADD, T0, delta, w32=True),
                    store_frame(fs.stack.spill_off(k), T0))


def _bulk_pointer(fs: FunctionState, dst: Reg, src: Reg, scratch: Reg) -> list[Insn]:
    """A pointer to the (checked) address in ``src``; ``scratch`` is clobbered on the map tier."""
    if not fs.info.window.is_map:
        return [addr_space_cast(dst, src, 0, 1)]
    return [*([] if dst == src else [mov(dst, src)]), *fs.info.window.masked_pointer(dst, abi.GIB4 - 1, scratch)]


def memory_size(fs: FunctionState) -> None:
    slot = fs.stack.push(Slot(I32))
    dst = fs.stack.dst(slot)
    fs.emit(ldx(8, dst, R10, BPF_RUNTIME), ldx(8, dst, dst, abi.CTRL_MEM_PAGES))
    fs.stack.finish(slot, dst, I32)


def _lowerings() -> dict[int, Lowering]:
    def load_of(size: int, sign_extend: bool, t: ValType) -> Lowering:
        return lambda fs, ins: load(fs, ins.imm_as(MemArg), size, sign_extend, t)

    def store_of(size: int) -> Lowering:
        return lambda fs, ins: store(fs, ins.imm_as(MemArg), size)

    table: dict[int, Lowering] = {op: load_of(*args) for op, args in _LOADS.items()}
    table.update({op: store_of(size) for op, size in _STORES.items()})
    table[Op.MEMORY_SIZE] = lambda fs, ins: memory_size(fs)
    table[Op.MEMORY_GROW] = lambda fs, ins: grow(fs)
    table[Op.MEMORY_FILL] = lambda fs, ins: bulk(fs, fill=True)
    table[Op.MEMORY_COPY] = lambda fs, ins: bulk(fs, fill=False)
    return table


LOWERINGS: dict[int, Lowering] = _lowerings()
