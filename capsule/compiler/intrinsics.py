"""The functions a guest may import from module ``capsule``: lowered inline, they are how guest code reaches
the host and the kernel (the guest's C runtime builds WASI on them).

- ``yield: [] -> []``: suspend; the host sees status YIELD, serves the guest (drains output buffers, refills
  input) and resumes the same call after the yield.
- ``exit: [i32] -> []``: end the call now with this code (status EXIT).
- ``clock_ns: [i32] -> [i64]``: 0 realtime (the boot-time clock plus an offset the host writes), 1 monotonic,
  2 and 3 (process and thread CPU time) read the monotonic clock too.
- ``random: [] -> [i32]``: 32 bits from ``bpf_get_prandom_u32``.
- ``unwind: [] -> []``: longjmp's second half (the guest's sjlj.c has recorded where to): pop software-stack
  frames up to the nearest one built by an ``env.invoke_*`` call, restore the C stack pointer saved in it, and
  continue after that call as if it had returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsule.bpf.asm import R1, R2, addr_space_cast, alu, call_helper, exit_, ja, jmp, ldx, may_goto, mov, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.uapi import Helper
from capsule.wasm import FuncType, ValType

from . import abi
from .values import BPF_FIBER, BPF_FP_SCALAR, BPF_RUNTIME, CALLER_SAVED, T0, T1, Slot
from .values import FP as R10

if TYPE_CHECKING:
    from .function import FunctionCompiler

SIGNATURES = {
    "yield": FuncType((), ()),
    "exit": FuncType((ValType.I32,), ()),
    "clock_ns": FuncType((ValType.I32,), (ValType.I64,)),
    "random": FuncType((), (ValType.I32,)),
    "unwind": FuncType((), ()),
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


def lower(fc: FunctionCompiler, name: str) -> None:
    {"yield": _yield, "exit": _exit, "clock_ns": _clock, "random": _random, "unwind": _unwind}[name](fc)


def _yield(fc: FunctionCompiler) -> None:
    h = len(fc.stack)
    fc.materialize_all()
    fc.spill_regs(h)
    cont = fc.new_region()
    # where to resume: kept in the fiber record; the dispatcher restores it when it reports YIELD
    fc.emit(ldx(8, T0, R10, BPF_FP_SCALAR), alu(Alu.LSH, T0, 32))
    ins = mov(T1, 0, w32=True)
    fc.code.region_ref(ins, cont)
    fc.emit(ins, alu(Alu.OR, T0, T1), ldx(8, T1, R10, BPF_FIBER), stx(8, T1, abi.FIBER_RESUME, T0))
    fc.leave_with_state(False, special=abi.SPECIAL_YIELD)
    fc.code.label(fc.region_label(cont))
    fc.reload_regs(h)


def _exit(fc: FunctionCompiler) -> None:
    slot, code = fc.pop()
    r = fc.read(slot, code, T0)
    fc.emit(ldx(8, T1, R10, BPF_FIBER), stx(8, T1, abi.FIBER_EXIT_CODE, r))
    fc.leave_with_state(False, special=abi.SPECIAL_EXIT)
    fc.dead = True


def _helper_call(fc: FunctionCompiler, below: int, emit_call) -> None:  # type: ignore[no-untyped-def]
    """Call a helper with the caller-saved stack registers below ``below`` saved around it; result in T0."""
    fc.materialize_all()
    fc.spill_regs(below, only=CALLER_SAVED)
    emit_call()
    fc.reload_regs(below, only=CALLER_SAVED)


def _clock(fc: FunctionCompiler) -> None:
    slot, clock = fc.pop()
    fc.push(clock)
    fc.materialize(slot)
    r = fc.read(slot, fc.stack[slot], T1)
    fc.emit(stx(8, R10, -64, r))  # the clock id survives the helper call on the BPF stack
    fc.stack.pop()

    def emit_call() -> None:
        mono = fc.code.fresh(f"f{fc.index}.clk")
        done = fc.code.fresh(f"f{fc.index}.clkd")
        fc.emit(ldx(8, T1, R10, -64), jmp(Jmp.JNE, T1, 0, mono, w32=True),
                call_helper(Helper.KTIME_GET_BOOT_NS), ldx(8, T1, R10, BPF_RUNTIME),
                ldx(8, T1, T1, abi.CTRL_REALTIME_OFFSET), alu(Alu.ADD, T0, T1), ja(done))
        fc.code.label(mono)
        fc.emit(call_helper(Helper.KTIME_GET_NS))
        fc.code.label(done)
        fc.emit(stx(8, R10, -64, T0))

    _helper_call(fc, slot, emit_call)
    slot = fc.push(Slot(ValType.I64))
    dst = fc.dst(slot)
    fc.emit(ldx(8, dst, R10, -64))
    fc.finish(slot, dst, ValType.I64)


def _random(fc: FunctionCompiler) -> None:
    below = len(fc.stack)

    def emit_call() -> None:
        fc.emit(call_helper(Helper.GET_PRANDOM_U32), mov(T0, T0, w32=True), stx(8, R10, -64, T0))

    _helper_call(fc, below, emit_call)
    slot = fc.push(Slot(ValType.I32))
    dst = fc.dst(slot)
    fc.emit(ldx(8, dst, R10, -64))
    fc.finish(slot, dst, ValType.I32)


def _unwind(fc: FunctionCompiler) -> None:
    """Walk the frame chain from ours to the first frame marked by an invoke (its flag word is non-zero) and
    continue at its return region with its caller's frame. Nothing after this call runs, so every register
    is free. A long chain is walked behind may_goto, resuming (a region of its own) from the frame reached."""
    region = fc.new_region()
    loop, found, susp = (fc.code.fresh(f"f{fc.index}.unw{s}") for s in ("loop", "found", "susp"))
    fc.code.label(fc.region_label(region))
    fc.emit(ldx(8, T0, R10, BPF_FP_SCALAR))
    fc.code.label(loop)
    fc.emit(jmp(Jmp.JEQ, T0, 0, fc.trap_label(abi.Trap.UNCAUGHT_LONGJMP)),
            addr_space_cast(R1, T0, 0, 1), ldx(4, R2, R1, abi.FRAME_RETURN + 4), jmp(Jmp.JNE, R2, 0, found),
            ldx(4, T0, R1, abi.FRAME_CALLER), may_goto(susp), ja(loop))
    fc.code.label(susp)  # resume the walk later, from the frame reached
    ins = mov(T1, 0, w32=True)
    fc.code.region_ref(ins, region)
    fc.emit(alu(Alu.LSH, T0, 32), ins, alu(Alu.OR, T0, T1), exit_())
    fc.code.label(found)
    sp = fc.info.stack_pointer_global
    if sp is not None:  # the C stack as it was when the invoke was made
        base, off = fc.global_addr(sp)
        fc.emit(alu(Alu.AND, R2, -2, w32=True), stx(8, base, off, R2))
    fc.emit(ldx(4, T1, R1, abi.FRAME_CALLER), alu(Alu.LSH, T1, 32), ldx(4, T0, R1, abi.FRAME_RETURN),
            alu(Alu.OR, T0, T1), exit_())
    fc.dead = True
