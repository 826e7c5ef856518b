"""The functions a guest may import from module ``capsule``: lowered inline, they are how guest code reaches
the host and the kernel (the guest's C runtime builds WASI on them).

- ``yield: [] -> []``: suspend; the host sees status YIELD, serves the guest (drains output buffers, refills
  input) and resumes the same call after the yield.
- ``exit: [i32] -> []``: end the call now with this code (status EXIT).
- ``clock_ns: [i32] -> [i64]``: 0 realtime (the boot-time clock plus an offset the host writes), 1 monotonic,
  2 and 3 (process and thread CPU time) read the monotonic clock too.
- ``random: [] -> [i32]``: 32 bits from ``bpf_get_prandom_u32``.
- ``emit: [i32 fd, i32 addr, i32 len] -> [i32]``: on a hook build, one record of output (at most
  ``hook_abi.OUT_MAX`` bytes of guest memory) into the ring buffer (``hooks.emit_function``); the bytes taken,
  or -1 when the ring is full (the loss is counted) or the build has no hook, hence no ring.
- ``fiber: [] -> [i32]``: the fiber running the call (on a hook, the CPU's number).
- ``unwind: [] -> []``: longjmp's second half (the guest's sjlj.c has recorded where to): pop software-stack
  frames up to the nearest one built by an ``env.invoke_*`` call, restore the C stack pointer saved in it, and
  continue after that call as if it had returned.
"""

from __future__ import annotations

from collections.abc import Callable

from capsule.bpf.asm import FP as R10
from capsule.bpf.asm import (
    R1,
    R2,
    R3,
    R4,
    alu,
    call,
    call_helper,
    exit_,
    ja,
    jmp,
    ldx,
    may_goto,
    mov,
    stx,
)
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.uapi import Helper
from capsule.ints import MASK32
from capsule.wasm import FuncType, ValType

from . import abi
from .abi import BPF_FIBER, BPF_FIBER_SCALAR, BPF_FP_SCALAR, BPF_RUNTIME, BPF_TEMP2
from .emit import T0, T1
from .hooks import EMIT_FUNC
from .state import FunctionState
from .values import CALLER_SAVED, Const, Slot, load_frame
from .variables import global_addr

SIGNATURES = {
    "yield": FuncType((), ()),
    "exit": FuncType((ValType.I32,), ()),
    "clock_ns": FuncType((ValType.I32,), (ValType.I64,)),
    "random": FuncType((), (ValType.I32,)),
    "unwind": FuncType((), ()),
    "emit": FuncType((ValType.I32, ValType.I32, ValType.I32), (ValType.I32,)),
    "fiber": FuncType((), (ValType.I32,)),
}
MODULE = "capsule"


def check_import(module: str, name: str, ft: FuncType) -> str | None:
    """None if (module, name) is an intrinsic of this type, else why not."""
    if module != MODULE:
        return f"no host function {module}.{name} (a guest may import only capsule.*)"
    want = SIGNATURES.get(name)
    if want is None:
        return f"no intrinsic capsule.{name} (there are: {', '.join(SIGNATURES)})"
    if want != ft:
        return f"capsule.{name} has type {want}, imported as {ft}"
    return None


def lower(fs: FunctionState, name: str) -> None:
    {"yield": _yield, "exit": _exit, "clock_ns": _clock, "random": _random, "unwind": _unwind,
     "emit": _emit, "fiber": _fiber}[name](fs)


def _yield(fs: FunctionState) -> None:
    h = len(fs.stack)
    fs.stack.materialize_all()
    fs.stack.spill_regs(h)
    cont = fs.new_region()
    fs.leave_for(cont, abi.SPECIAL_YIELD)
    fs.code.label(cont.label)
    fs.stack.reload_regs(h)


def _exit(fs: FunctionState) -> None:
    slot, code = fs.stack.pop()
    r = fs.stack.read(slot, code, T0)
    fs.emit(ldx(8, T1, R10, BPF_FIBER), stx(8, T1, abi.FIBER_EXIT_CODE, r))
    fs.leave_with_state(False, special=abi.SPECIAL_EXIT)
    fs.dead = True


def _helper_call(fs: FunctionState, below: int, emit_call: Callable[[], None]) -> None:
    """Call a helper with the caller-saved stack registers below ``below`` saved around it; result in T0."""
    fs.stack.materialize_all()
    fs.stack.spill_regs(below, only=CALLER_SAVED)
    emit_call()
    fs.stack.reload_regs(below, only=CALLER_SAVED)


def _clock(fs: FunctionState) -> None:
    slot, clock = fs.stack.pop()
    fs.stack.push(clock)
    fs.stack.materialize(slot)
    r = fs.stack.read(slot, fs.stack[slot], T1)
    fs.emit(stx(8, R10, BPF_TEMP2, r))  # the clock id survives the helper call on the BPF stack
    fs.stack.pop()

    def emit_call() -> None:
        mono = fs.fresh("clk")
        done = fs.fresh("clkd")
        fs.emit(ldx(8, T1, R10, BPF_TEMP2), jmp(Jmp.JNE, T1, 0, mono, w32=True),
                call_helper(Helper.KTIME_GET_BOOT_NS), ldx(8, T1, R10, BPF_RUNTIME),
                ldx(8, T1, T1, abi.CTRL_REALTIME_OFFSET), alu(Alu.ADD, T0, T1), ja(done))
        fs.code.label(mono)
        fs.emit(call_helper(Helper.KTIME_GET_NS))
        fs.code.label(done)
        fs.emit(stx(8, R10, BPF_TEMP2, T0))

    _helper_call(fs, slot, emit_call)
    slot = fs.stack.push(Slot(ValType.I64))
    dst = fs.stack.dst(slot)
    fs.emit(ldx(8, dst, R10, BPF_TEMP2))
    fs.stack.finish(slot, dst, ValType.I64)


def _random(fs: FunctionState) -> None:
    below = len(fs.stack)

    def emit_call() -> None:
        fs.emit(call_helper(Helper.GET_PRANDOM_U32), mov(T0, T0, w32=True), stx(8, R10, BPF_TEMP2, T0))

    _helper_call(fs, below, emit_call)
    slot = fs.stack.push(Slot(ValType.I32))
    dst = fs.stack.dst(slot)
    fs.emit(ldx(8, dst, R10, BPF_TEMP2))
    fs.stack.finish(slot, dst, ValType.I32)


def _fiber(fs: FunctionState) -> None:
    slot = fs.stack.push(Slot(ValType.I32))
    dst = fs.stack.dst(slot)
    assert abi.FIBER_SIZE == 1 << 8
    fs.emit(ldx(8, dst, R10, BPF_FIBER_SCALAR), mov(T1, abi.FIBERS, w32=True), alu(Alu.SUB, dst, T1, w32=True),
            alu(Alu.RSH, dst, 8, w32=True))
    fs.stack.finish(slot, dst, ValType.I32)


def _emit(fs: FunctionState) -> None:
    """A call of the global function ``capsule_emit(fd, addr, len, fiber)``, the operands passed from their
    frame slots (every register saved around it); without a hook there is no ring: -1."""
    h = len(fs.stack)
    base = h - 3
    if fs.opt.hook is None:
        fs.stack.truncate(base)
        fs.stack.push(Const(ValType.I32, MASK32))
        return
    fs.stack.materialize_all()
    fs.stack.spill_regs(h)
    fs.emit(*(load_frame(r, fs.stack.spill_off(base + k)) for k, r in enumerate((R1, R2, R3))),
            ldx(8, R4, R10, BPF_FIBER_SCALAR), call(EMIT_FUNC), stx(8, R10, BPF_TEMP2, T0))
    fs.stack.truncate(base)
    fs.stack.reload_regs(base)
    slot = fs.stack.push(Slot(ValType.I32))
    dst = fs.stack.dst(slot)
    fs.emit(ldx(8, dst, R10, BPF_TEMP2), mov(dst, dst, w32=True))
    fs.stack.finish(slot, dst, ValType.I32)


def _unwind(fs: FunctionState) -> None:
    """Walk the frame chain from ours to the first frame marked by an invoke (its flag word is non-zero) and
    continue at its return region with its caller's frame. Nothing after this call runs, so every register
    is free. A long chain is walked behind may_goto, resuming (a region of its own) from the frame reached;
    without may_goto (the bounded profile) every frame is such a step."""
    region = fs.new_region()
    loop, found, susp = (fs.fresh(f"unw{s}") for s in ("loop", "found", "susp"))
    fs.code.label(region.label)
    fs.emit(ldx(8, T0, R10, BPF_FP_SCALAR))
    fs.code.label(loop)
    fs.emit(jmp(Jmp.JEQ, T0, 0, fs.trap_label(abi.Trap.UNCAUGHT_LONGJMP)),
            *fs.info.window.pointer("stack", R1, T0, R2), ldx(4, R2, R1, abi.FRAME_RETURN + 4),
            jmp(Jmp.JNE, R2, 0, found),
            ldx(4, T0, R1, abi.FRAME_CALLER), *([may_goto(susp), ja(loop)] if fs.opt.may_goto else [ja(susp)]))
    fs.code.label(susp)  # resume the walk later, from the frame reached
    ins = mov(T1, 0, w32=True)
    fs.code.region_ref(ins, region)
    fs.emit(alu(Alu.LSH, T0, 32), ins, alu(Alu.OR, T0, T1), exit_())
    fs.code.label(found)
    sp = fs.info.stack_pointer_global
    if sp is not None:  # the C stack as it was when the invoke was made
        base, off = global_addr(fs, sp)
        fs.emit(alu(Alu.AND, R2, -2, w32=True), stx(8, base, off, R2))
    fs.emit(ldx(4, T1, R1, abi.FRAME_CALLER), alu(Alu.LSH, T1, 32), ldx(4, T0, R1, abi.FRAME_RETURN),
            alu(Alu.OR, T0, T1), exit_())
    fs.dead = True
