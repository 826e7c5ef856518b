"""Locals, globals, and the parametric instructions (drop, select).

Locals live in the function's frame, except the few ``register_plan`` keeps in callee-saved registers inside
a region. Globals live in the runtime area of the window (8 bytes each), except the C shadow-stack pointer,
which every fiber keeps in its own record.
"""

from __future__ import annotations

from capsule.bpf.asm import FP, Reg, alu, jmp, ldx, mov, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import Instr, Op

from . import abi
from .abi import BPF_FIBER, BPF_RUNTIME
from .emit import T0, T1, slot_imm
from .state import FunctionState, Lowering
from .values import Const, Local, Slot, load_frame, store_frame, store_frame_imm


def local_get(fs: FunctionState, ins: Instr) -> None:
    """A local kept in a register costs no code: its value is read from the register when it is consumed
    (``values.Local``). A local in the frame is loaded now: deferring those loads too (to the instruction that
    consumes the value, or to a join) made the verifier's work grow instead of shrink, printf_core's from
    107k to 165k processed instructions and Lua's past the 1M limit, for 3% fewer instructions."""
    n = ins.imm_as(int)
    t = fs.func.locals[n]
    if n in fs.local_regs:
        fs.stack.push(Local(t, n))
        return
    slot = fs.stack.push(Slot(t))
    dst = fs.stack.dst(slot)
    fs.emit(load_frame(dst, fs.stack.local_off(n)))
    if fs.stack.home(slot) is None:
        fs.emit(store_frame(fs.stack.spill_off(slot), dst))


def set_local(fs: FunctionState, n: int, keep: bool) -> None:
    """local.set (``keep``: local.tee, which leaves the local's new value on the stack) of local ``n``."""
    slot = len(fs.stack) - 1
    e = fs.stack[slot]
    if isinstance(e, Local) and e.n == n:  # local.get n; local.set n
        if not keep:
            fs.stack.pop()
        return
    fs.stack.detach_local(n, below=slot)  # reads of the old value still pending below
    off = abi.FRAME_LOCALS + abi.SLOT * n
    lr = fs.local_regs.get(n)
    imm = slot_imm(e) if isinstance(e, Const) else None
    if lr is not None:
        fs.stack.read_into(lr, slot, e)
    elif imm is not None:
        fs.emit(store_frame_imm(off, imm))
    else:
        r = fs.stack.read(slot, e, T0)
        fs.emit(store_frame(off, r))
    if not keep:
        fs.stack.pop()
    elif lr is not None:  # the value stays on the stack: it is the local's register now
        fs.stack.pop()
        fs.stack.push(Local(fs.func.locals[n], n))


def local_set(fs: FunctionState, ins: Instr) -> None:
    set_local(fs, ins.imm_as(int), keep=False)


def local_tee(fs: FunctionState, ins: Instr) -> None:
    set_local(fs, ins.imm_as(int), keep=True)


def global_addr(fs: FunctionState, g: int) -> tuple[Reg, int]:
    """Load the base pointer for global ``g`` into T1; returns (base, offset)."""
    if g == fs.info.stack_pointer_global:
        fs.emit(ldx(8, T1, FP, BPF_FIBER))
        return T1, abi.FIBER_STACK_POINTER
    off = abi.GLOBALS - abi.RT_BASE + abi.SLOT * g
    fs.emit(ldx(8, T1, FP, BPF_RUNTIME))
    if off >= 1 << 15:
        fs.emit(alu(Alu.ADD, T1, off))
        off = 0
    return T1, off


def global_get(fs: FunctionState, ins: Instr) -> None:
    g = ins.imm_as(int)
    t = fs.m.all_globals()[g].type
    slot = fs.stack.push(Slot(t))
    base, off = global_addr(fs, g)
    dst = fs.stack.dst(slot)
    fs.emit(ldx(8, dst, base, off))
    if fs.stack.home(slot) is None:
        fs.emit(store_frame(fs.stack.spill_off(slot), dst))


def global_set(fs: FunctionState, ins: Instr) -> None:
    g = ins.imm_as(int)
    slot, e = fs.stack.pop()
    r = fs.stack.read(slot, e, T0)
    base, off = global_addr(fs, g)
    fs.emit(stx(8, base, off, r))
    if g == fs.info.stack_pointer_global:
        # the C stack pointer must stay within the fiber's C stack: past its bottom it would grow into the data
        # below (output waiting to be drained, the heap), and wrap around past zero in a stack-first layout
        trap = fs.trap_label(abi.Trap.STACK_OVERFLOW)
        fs.emit(ldx(8, T1, T1, abi.FIBER_STACK_LOW), jmp(Jmp.JLT, r, T1, trap),
                ldx(8, T1, FP, BPF_FIBER), ldx(8, T1, T1, abi.FIBER_STACK_HIGH), jmp(Jmp.JGT, r, T1, trap))


def drop(fs: FunctionState, ins: Instr) -> None:
    fs.stack.pop()


def select(fs: FunctionState, ins: Instr) -> None:
    cs, cond = fs.stack.pop()
    bs, b = fs.stack.pop()
    a_slot = len(fs.stack) - 1
    a = fs.stack[a_slot]
    t = a.type
    dst = fs.stack.dst(a_slot)
    fs.stack.read_into(dst, a_slot, a)
    rc = fs.stack.read(cs, cond, T1)
    skip = fs.fresh("sel")
    fs.emit(jmp(Jmp.JNE, rc, 0, skip, w32=True))
    fs.emit(mov(dst, fs.stack.read(bs, b, T1)))
    fs.code.label(skip)
    fs.stack.finish(a_slot, dst, t)


LOWERINGS: dict[int, Lowering] = {
    Op.LOCAL_GET: local_get, Op.LOCAL_SET: local_set, Op.LOCAL_TEE: local_tee, Op.GLOBAL_GET: global_get,
    Op.GLOBAL_SET: global_set, Op.DROP: drop, Op.SELECT: select, Op.SELECT_T: select,
}
