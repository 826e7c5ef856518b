"""Lowering one wasm function to BPF: its entry, one table from opcode to lowering, and the walk over the body.

The function becomes one block of BPF code with several entry points (its *regions*, ``state``). Every
instruction is lowered by the function ``LOWERINGS`` maps its opcode to, each instruction-selection module
contributing its own instructions; an opcode no module lowers fails in one place, naming the instruction.
Unreachable code (after a branch, a return or a trap) is skipped up to the ``else``/``end`` that ends it.
Afterwards the out-of-line stubs (traps, suspended loops) follow the body, and the frame size, now known,
is patched into the instructions that need it.
"""

from __future__ import annotations

from capsule.bpf.asm import FP, R1, R2, AsmError, alu, jmp, ldx, mov, st
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import OP_MASK, Alu, Jmp
from capsule.wasm import Instr, Op, op_name

from . import abi, atomics, calls, control, floats, integers, memory, tables, variables
from .abi import BPF_FIBER, BPF_FP_SCALAR
from .calls import direct_callee_entry
from .dispatcher import frame_setup, leaf_name
from .emit import T0, T1
from .state import Ctl, FunctionState, LoweredFunction, Lowering, ModuleInfo
from .values import FRAME, FrameLayout, load_frame, store_frame_imm


def _merge(*tables: dict[int, Lowering]) -> dict[int, Lowering]:
    out: dict[int, Lowering] = {}
    for table in tables:
        both = out.keys() & table.keys()
        assert not both, f"opcodes lowered twice: {sorted(map(op_name, both))}"
        out.update(table)
    return out


LOWERINGS: dict[int, Lowering] = _merge(control.LOWERINGS, calls.LOWERINGS, variables.LOWERINGS,
                                        integers.LOWERINGS, floats.LOWERINGS, memory.LOWERINGS, tables.LOWERINGS,
                                        atomics.LOWERINGS)
"""Every opcode the compiler lowers, and how."""


def compile_function(info: ModuleInfo, index: int, *, leaf: bool = False) -> LoweredFunction:
    """Lower defined function ``index``; raises ``CompileError`` for an instruction capsule does not lower."""
    fs = FunctionState(info, index, leaf=leaf)
    body = fs.func.body
    entry = fs.new_region()
    if fs.leaf:
        fs.code.label(leaf_name(fs.index))
        fs.emit(*frame_setup(R1, R2, info.window))  # r1 = frame, r2 = fiber record (guest addresses)
    else:
        fs.code.label(entry.label)
        if fs.index in info.direct_callees:
            direct_callee_entry(fs, entry)
    _prologue(fs)
    fs.ctls.append(Ctl("func", f"f{fs.index}.end", 0, (), fs.type.results, len(body) - 1))
    branches = _BranchCount()
    while fs.pos < len(body):
        ins = body[fs.pos]
        if fs.dead and ins.op not in (Op.ELSE, Op.END):
            fs.pos = control.skip_dead(fs, fs.pos)
            continue
        if branches.update(fs.code.insns) >= SPLIT_BRANCHES and control.can_split(fs):
            control.split_region(fs)
        try:
            LOWERINGS.get(ins.op, _unsupported)(fs, ins)
        except AsmError as e:  # a limit of BPF's encoding this function reaches (the build names the function)
            raise fs.unsupported(f"{op_name(ins.op)}: {e}") from None
        fs.pos += 1
    for label, stub in fs.pending_stubs:
        fs.code.label(label)
        fs.code.append(stub)
    _trap_stubs(fs)
    frame = FrameLayout(len(fs.func.locals), fs.stack.max_height)
    for insn, fld, sign in fs.frame_fixups:
        setattr(insn, fld, getattr(insn, fld) + sign * frame.size)
    fs.code.widen_offsets(FRAME)
    return LoweredFunction(fs.index, fs.code, fs.regions, frame, fs.direct_calls)


# Conditional jumps along one path of straight code before it is cut by a region boundary. The verifier keeps
# a pending state for every branch it has not taken yet and refuses a path with more than 8,192 of them ("the
# sequence of 8193 jumps is too complex"): a long function of ifs (generated code, a big switch lowered to
# compares) reaches that on its own. The margin is for the region tree, and for code that offers no place to
# cut for a while (``control.can_split``).
SPLIT_BRANCHES = 3000


class _BranchCount:
    """Conditional jumps emitted since the code last ended a path (an ``exit``), counted incrementally."""

    def __init__(self) -> None:
        self.seen = 0
        self.count = 0

    def update(self, insns: list[Insn]) -> int:
        for ins in insns[self.seen:]:
            if ins.is_exit:
                self.count = 0
            elif ins.is_jump and ins.code & OP_MASK != Jmp.JA:
                self.count += 1
        self.seen = len(insns)
        return self.count


def _unsupported(fs: FunctionState, ins: Instr) -> None:
    raise fs.unsupported(f"instruction {op_name(ins.op)}")


def _prologue(fs: FunctionState) -> None:
    """Function entry: check the software stack has room for the frame, zero the non-parameter locals that are
    read before they are written."""
    # frames are laid out in a stack_size-aligned area, so the offset within the stack is fp & (size - 1)
    size = fs.opt.stack_size
    fs.emit(ldx(8, T0, FP, BPF_FP_SCALAR), alu(Alu.AND, T0, size - 1))
    limit = jmp(Jmp.JGT, T0, size - fs.info.frame_margin, fs.trap_label(abi.Trap.STACK_OVERFLOW))
    fs.emit(fs.frame_relative(limit, "imm", -1))
    # a local every path writes before it reads (dead at the entry) needs no zero in the frame, nor a parameter
    # its load; a register local always gets a value (``stack.reload_regs`` says why)
    live = fs.live.before[0] if fs.func.body else 0
    for i in range(fs.func.num_params, len(fs.func.locals)):
        if i not in fs.local_regs and live >> i & 1:
            fs.emit(store_frame_imm(abi.FRAME_LOCALS + abi.SLOT * i, 0))
    for n, r in fs.local_regs.items():
        if n < fs.func.num_params and live >> n & 1:
            fs.emit(load_frame(r, abi.FRAME_LOCALS + abi.SLOT * n))
        else:
            fs.emit(mov(r, 0))


def _trap_stubs(fs: FunctionState) -> None:
    entry = fs.regions[0]
    for (code, origin), lab in fs.trap_labels.items():
        fs.code.label(lab)
        # remember which function trapped (its entry region, and the inlined callee if the trap is in one);
        # the frame chain gives the callers
        fs.emit(ldx(8, T1, FP, BPF_FIBER))
        ins = st(4, T1, abi.FIBER_TRAP_REGION, 0)
        fs.code.region_ref(ins, entry)
        fs.emit(ins, st(8, T1, abi.FIBER_TRAP_INLINED, 0 if origin is None else origin + 1))
        fs.leave_with_state(False, special=abi.SPECIAL_BASE + code)
