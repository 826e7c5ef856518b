"""The state of one wasm function while it is lowered, and what every lowering shares: its code, operand
stack, open blocks, regions, traps, and the ways out of a region.

A function becomes one block of BPF code with several entry points, its *regions* (the function entry, the
continuation after every call, the head of every loop). Leaving the block (a call, a return, a suspension, a
trap) means returning the next state, ``frame pointer << 32 | region id``, to the dispatcher. Region ids and
the frame size are not known while the function is lowered: instructions that need them are recorded
(``Code.region_ref``, ``frame_fixups``) and patched afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from capsule.bpf.asm import FP, Reg, alu, exit_, ja, ldx, mov, stx
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu
from capsule.wasm import BlockType, FuncType, Instr, Module, Op, UnsupportedError, ValType

from . import abi
from .abi import BPF_FIBER, BPF_FP_SCALAR
from .code import Code, RegionKey
from .emit import T0, T1
from .liveness import liveness
from .options import Options
from .stack import OperandStack
from .values import FrameLayout, register_plan
from .window import ARENA, Window

if TYPE_CHECKING:
    from .packing import Plan


class CompileError(UnsupportedError):
    """A construct the compiler does not (yet) lower; names the function and offset like other wasm errors."""


@dataclass
class ModuleInfo:
    """What lowering one function needs to know about the rest of the module."""

    module: Module
    options: Options
    type_ids: dict[FuncType, int]  # canonical signature ids for call_indirect
    frame_margin: int  # bytes a caller may write beyond its frame (next callee's header and arguments)
    stack_pointer_global: int | None  # the C shadow-stack pointer: kept per fiber
    imported_funcs: int = 0
    leaves: frozenset[int] = frozenset()  # functions compiled as plain BPF functions
    library_used: set[str] = field(default_factory=set)  # soft-float functions the code calls
    # function -> (first, end, callee): body ranges that are an inlined callee's body (for backtraces)
    inlined: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    # fast mode's address mask (``abi.fast_mask``)
    memory_mask: int = abi.FAST_MAX_BYTES - 1
    # how the code reaches the window (``window``): the arena, or the map tier's pieces
    window: Window = ARENA
    # which physical function each function goes into (``packing``), decided before lowering
    plan: Plan | None = None
    # functions some caller in their physical function calls directly (their entry is built for it), and
    # those of them that return straight to such callers (``calls.leave_return``)
    direct_callees: frozenset[int] = frozenset()
    direct_returners: frozenset[int] = frozenset()
    # the direct callees on a cycle of direct calls (recursion): the only ones whose entries and returns
    # need a may_goto to bound the chain
    direct_recursive: frozenset[int] = frozenset()

    def direct(self, caller: int, callee: int) -> bool:
        """A call from ``caller`` to ``callee`` is a jump within one physical function (which needs may_goto
        to bound the chain of such jumps)."""
        return self.options.may_goto and self.plan is not None and self.plan.direct(caller, callee)

    def nested(self, caller: int, callee: int) -> bool:
        """A call from ``caller`` to ``callee`` is a BPF call of the callee's physical function."""
        return self.plan is not None and self.plan.nested(caller, callee)


@dataclass
class LoweredFunction:
    index: int
    code: Code
    regions: list[RegionKey] = field(default_factory=list)
    frame: FrameLayout | None = None
    # (callee, continuation) of every direct call: where the callee's returns may jump straight back to
    direct_calls: list[tuple[int, RegionKey]] = field(default_factory=list)


@dataclass
class Ctl:
    """An open block/loop/if (or the function body itself)."""

    kind: Literal["func", "block", "loop", "if"]
    label: str  # branch target: the loop head for loops, the end otherwise
    base: int  # operand-stack height below the block's parameters
    params: tuple[ValType, ...]
    results: tuple[ValType, ...]
    end_index: int  # index of the matching ``end`` in the body
    else_index: int = -1
    else_label: str | None = None
    targeted: bool = False  # some branch goes to the end label
    region: RegionKey | None = None  # loops: where a suspended loop resumes
    in_else: bool = False
    widen: tuple[tuple[int, Reg], ...] = ()  # loops: the register locals the body writes (``control.loop``)
    latch: str | None = None  # loops: the back-edge code every later back-edge jumps to (``control.jump_to``)
    live: int = -1  # loops: the locals live at the head (``liveness``), what a suspended loop keeps

    @property
    def branch_types(self) -> tuple[ValType, ...]:
        return self.params if self.kind == "loop" else self.results


class FunctionState:
    def __init__(self, info: ModuleInfo, index: int, *, leaf: bool = False) -> None:
        self.info = info
        # a leaf (no calls, no loops: it cannot suspend) is compiled as its own global BPF function, called
        # directly by its callers; its entry region is a stub that calls it (for the host and call_indirect)
        self.leaf = leaf
        self.m = info.module
        self.opt = info.options
        self.index = index
        func = self.m.defined_func(index)
        assert func is not None
        self.func = func
        self.type = self.m.func_type(index)
        self.name = self.m.func_name(index) or f"func{index}"
        self.code = Code()
        self.ctls: list[Ctl] = []
        self.dead = False  # the code being lowered is unreachable
        self.regions: list[RegionKey] = []
        # instructions whose field gets the frame size added (sign 1) or subtracted (-1) once it is known
        self.frame_fixups: list[tuple[Insn, Literal["imm", "off"], int]] = []
        self.trap_labels: dict[tuple[abi.Trap, int | None], str] = {}
        self.pending_stubs: list[tuple[str, Code]] = []  # out-of-line code placed after the body
        self.direct_calls: list[tuple[int, RegionKey]] = []
        self.pos = 0  # index of the instruction being lowered (for errors, and for fusing with the next one)
        # the hottest locals live in callee-saved registers inside a region; the operand stack takes the rest
        local_regs, stack_regs = register_plan(func)
        self.local_regs: dict[int, Reg] = local_regs
        # a register local is saved and reloaded only where it is live (dead ones may hold anything, even
        # nothing the verifier would let us read: no path reads them before writing them)
        self.live = liveness(func)
        self.live_override: int | None = None  # set while code for another point than ``pos`` is emitted
        self.stack = OperandStack(self, len(func.locals), stack_regs, local_regs, self._next_set, self.live_mask)

    def live_mask(self) -> int:
        """The locals live just before or just after the instruction being lowered: what code emitted for it
        (a call's saves and reloads, a loop's entry and back-edges, a region's exit) must keep."""
        if self.live_override is not None:
            return self.live_override
        if self.pos >= len(self.func.body):
            return 0
        return self.live.before[self.pos] | self.live.after(self.pos)

    def _next_set(self) -> int | None:
        """The local the instruction after the one being lowered sets (local.set/tee), if any."""
        body = self.func.body
        nxt = body[self.pos + 1] if self.pos + 1 < len(body) else None
        if nxt is not None and nxt.op in (Op.LOCAL_SET, Op.LOCAL_TEE) and isinstance(nxt.imm, int) and not self.dead:
            return nxt.imm
        return None

    def emit(self, *insns: Insn) -> None:
        self.code.emit(*insns)

    def just_emitted(self, insn: Insn) -> bool:
        return self.code.just_emitted(insn)

    def retract(self, insn: Insn) -> None:
        self.code.retract(insn)

    def fresh(self, stem: str) -> str:
        """A new label of this function."""
        return self.code.fresh(f"f{self.index}.{stem}")

    def unsupported(self, what: str) -> CompileError:
        ins = self.func.body[self.pos] if self.pos < len(self.func.body) else None
        return CompileError(what, offset=ins.offset if ins else self.func.offset, func=self.index,
                            func_name=self.name)

    def block_types(self, bt: BlockType) -> tuple[tuple[ValType, ...], tuple[ValType, ...]]:
        if bt.type_index is not None:
            ft = self.m.types[bt.type_index]
            return ft.params, ft.results
        return (), ((bt.result,) if bt.result is not None else ())

    # -- regions and frames ---------------------------------------------------------------------------------
    def new_region(self) -> RegionKey:
        key = RegionKey(self.index, len(self.regions))
        self.regions.append(key)
        return key

    def frame_relative(self, ins: Insn, fld: Literal["imm", "off"], sign: int = 1) -> Insn:
        """``ins`` with ``sign`` times the frame size added to its ``fld`` once the size is known."""
        self.frame_fixups.append((ins, fld, sign))
        return ins

    def callee_frame(self, ins: Insn) -> Insn:
        """An access to the callee's frame, which starts where ours ends: its offset gets our frame size."""
        return self.frame_relative(ins, "off")

    # -- leaving the region ---------------------------------------------------------------------------------
    def leave_with_state(self, fp_delta_from_frame: bool, region: RegionKey | None = None,
                         special: int | None = None) -> None:
        """``r0 = (fp [+ frame size]) << 32 | next``; exit to the dispatcher."""
        self.emit(ldx(8, T0, FP, BPF_FP_SCALAR))
        if fp_delta_from_frame:
            self.emit(self.frame_relative(alu(Alu.ADD, T0, 0), "imm"))
        self.emit(alu(Alu.LSH, T0, 32))
        if region is not None:
            ins = mov(T1, 0, w32=True)
            self.code.region_ref(ins, region)
            self.emit(ins, alu(Alu.OR, T0, T1), exit_())
        else:
            assert special is not None
            self.emit(mov(T1, special, w32=True), alu(Alu.OR, T0, T1), exit_())

    def leave_for(self, resume: RegionKey, special: int) -> None:
        """Leave with outcome ``special`` (a yield, a grow) for the host to serve; the fiber then continues at
        ``resume`` (kept in the fiber record, which the dispatcher restores as the fiber's state)."""
        self.emit(ldx(8, T0, FP, BPF_FP_SCALAR), alu(Alu.LSH, T0, 32))
        ins = mov(T1, 0, w32=True)
        self.code.region_ref(ins, resume)
        self.emit(ins, alu(Alu.OR, T0, T1), ldx(8, T1, FP, BPF_FIBER), stx(8, T1, abi.FIBER_RESUME, T0))
        self.leave_with_state(False, special=special)

    def next_region(self) -> None:
        """Continue at the state in T0, through the dispatcher.

        (Jumping straight to a region of the same physical function was tried: no measurable gain, and it made
        every such jump a path back into the region tree, which multiplied the verifier's work ~35x on
        wasi-libc's malloc.)"""
        self.emit(exit_())

    # -- traps ----------------------------------------------------------------------------------------------
    def trap_label(self, code: abi.Trap) -> str:
        """A label that ends the call with trap ``code`` (one out-of-line stub per code and function, and per
        inlined callee the trapping instruction came from)."""
        origin = self.inlined_origin()
        lab = self.trap_labels.get((code, origin))
        if lab is None:
            lab = f"f{self.index}.trap.{code.name.lower()}" + (f".in{origin}" if origin is not None else "")
            self.trap_labels[(code, origin)] = lab
        return lab

    def inlined_origin(self) -> int | None:
        """The function whose inlined body holds the instruction being lowered, if any."""
        for start, end, callee in self.info.inlined.get(self.index, ()):
            if start <= self.pos < end:
                return callee
        return None

    def trap(self, code: abi.Trap) -> None:
        self.emit(ja(self.trap_label(code)))


Lowering = Callable[[FunctionState, Instr], None]
"""Lowers one instruction (``state.pos`` is its index; a lowering that fuses the next one advances it)."""
