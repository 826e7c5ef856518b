"""Lowering one wasm function to BPF: the operand stack, control flow, calls, and the function's regions.

The function becomes one block of BPF code with several entry points (its *regions*): the function entry, the
continuation after every call, and the head of every loop (where a loop suspended by ``may_goto``, or every
iteration in the profile without ``may_goto``, resumes). Control flow inside the function is plain BPF jumps;
only calls, returns, suspensions and traps leave the block, by returning the next state to the dispatcher.

At a region boundary every live operand-stack value is stored to its frame spill slot; a region entry loads
them back. Locals always live in the frame. See ``values`` for where operands live and ``abi`` for frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.asm import (
    R1,
    R2,
    alu,
    exit_,
    ja,
    jmp,
    ld_imm64,
    ldx,
    may_goto,
    mov,
    st,
    stx,
)
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import BlockType, FuncType, Instr, Module, Op, UnsupportedError, ValType

from . import abi
from .abi import BPF_CALL_REGION, BPF_FIBER, BPF_FIBER_SCALAR, BPF_FP_SCALAR, BPF_RUNTIME
from .code import Code, RegionKey
from .options import Options
from .values import (
    CALLER_SAVED,
    FRAME,
    T0,
    T1,
    Const,
    Entry,
    FrameLayout,
    Reg,
    Slot,
    fits_imm32,
    is64,
    register_plan,
)
from .values import FP as R10


class CompileError(UnsupportedError):
    """A construct the compiler does not (yet) lower; names the function and offset like other wasm errors."""


@dataclass
class Ctl:
    """An open block/loop/if (or the function body itself)."""

    kind: str  # "func", "block", "loop", "if"
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

    @property
    def branch_types(self) -> tuple[ValType, ...]:
        return self.params if self.kind == "loop" else self.results


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


@dataclass
class LoweredFunction:
    index: int
    code: Code
    regions: list[RegionKey] = field(default_factory=list)
    frame: FrameLayout | None = None


class FunctionCompiler:
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
        self.stack: list[Entry] = []
        self.max_stack = 0
        self.ctls: list[Ctl] = []
        self.dead = False
        self.regions: list[RegionKey] = []
        # instructions whose off/imm must get the frame size added once it is known
        self.frame_fixups: list[tuple[Insn, str, int]] = []
        self.trap_labels: dict[tuple[abi.Trap, int | None], str] = {}
        self.pending_stubs: list[tuple[str, Code]] = []
        self.pos = 0  # index of the instruction being lowered (for errors)
        # the hottest locals live in callee-saved registers inside a region; the operand stack takes the rest
        self.local_regs, self.stack_regs = register_plan(func)

    # -- errors ---------------------------------------------------------------------------------------------
    def unsupported(self, what: str) -> CompileError:
        ins = self.func.body[self.pos] if self.pos < len(self.func.body) else None
        return CompileError(what, offset=ins.offset if ins else self.func.offset, func=self.index,
                            func_name=self.name)

    # -- regions --------------------------------------------------------------------------------------------
    def new_region(self) -> RegionKey:
        key = RegionKey(self.index, len(self.regions))
        self.regions.append(key)
        return key

    @staticmethod
    def region_label(key: RegionKey) -> str:
        return f"r{key.func}.{key.index}"

    # -- operand stack --------------------------------------------------------------------------------------
    def push(self, e: Entry) -> int:
        self.stack.append(e)
        self.max_stack = max(self.max_stack, len(self.stack))
        return len(self.stack) - 1

    def home(self, slot: int) -> Reg | None:
        """The register a stack slot lives in, or None when it lives in its frame slot."""
        return self.stack_regs[slot] if slot < len(self.stack_regs) else None

    def pop(self) -> tuple[int, Entry]:
        e = self.stack.pop()
        return len(self.stack), e

    def spill_off(self, slot: int) -> int:
        """Frame offset of a slot's spill location (frame size not yet known: offset from the locals' end)."""
        return abi.FRAME_LOCALS + abi.SLOT * (len(self.func.locals) + slot)

    def emit(self, *insns: Insn) -> None:
        self.code.emit(*insns)

    def load_const(self, reg: Reg, c: Const) -> None:
        if is64(c.type):
            v = c.bits & 0xFFFF_FFFF_FFFF_FFFF
            sv = v - (1 << 64) if v >> 63 else v
            if fits_imm32(sv):
                self.emit(mov(reg, sv))
            else:
                self.emit(ld_imm64(reg, v))
        else:
            self.emit(mov(reg, c.bits & 0xFFFF_FFFF, w32=True))

    def read(self, slot: int, e: Entry, temp: Reg) -> Reg:
        """A register holding the value of stack entry ``e`` at ``slot`` (its home register, or ``temp``)."""
        if isinstance(e, Const):
            self.load_const(temp, e)
            return temp
        r = self.home(slot)
        if r is not None:
            return r
        self.emit(ldx(8, temp, FRAME, self.spill_off(slot)))
        return temp

    def read_into(self, dst: Reg, slot: int, e: Entry) -> None:
        r = self.read(slot, e, dst)
        if r != dst:
            self.emit(mov(dst, r))

    def dst(self, slot: int) -> Reg:
        """The register a result for ``slot`` is computed in (its home, or T0 when the home is memory)."""
        r = self.home(slot)
        return r if r is not None else T0

    def finish(self, slot: int, reg: Reg, t: ValType) -> None:
        """Record that ``reg`` holds the new value of ``slot`` (storing it if the slot lives in memory)."""
        if self.home(slot) is None:
            self.emit(stx(8, FRAME, self.spill_off(slot), reg))
        self.stack[slot:] = []
        self.push(Slot(t))

    def materialize(self, slot: int) -> None:
        e = self.stack[slot]
        if not isinstance(e, Const):
            return
        r = self.home(slot)
        if r is not None:
            self.load_const(r, e)
        else:
            self.load_const(T0, e)
            self.emit(stx(8, FRAME, self.spill_off(slot), T0))
        self.stack[slot] = Slot(e.type)

    def materialize_all(self) -> None:
        for i in range(len(self.stack)):
            self.materialize(i)

    def move(self, src: int, dst: int) -> None:
        """Copy the value of slot ``src`` into slot ``dst`` (dst <= src) and mark it placed."""
        e = self.stack[src]
        if src == dst:
            self.materialize(dst)
            return
        rd = self.home(dst)
        if rd is not None:
            self.read_into(rd, src, e)
        else:
            r = self.read(src, e, T0)
            self.emit(stx(8, FRAME, self.spill_off(dst), r))
        self.stack[dst] = Slot(e.type)

    def spill_regs(self, height: int, only: frozenset[Reg] | None = None) -> None:
        """Store register-homed slots below ``height`` to their spill locations (before leaving the region)."""
        for i in range(min(height, len(self.stack_regs))):
            r = self.stack_regs[i]
            if only is None or r in only:
                self.emit(stx(8, FRAME, self.spill_off(i), r))
        if only is None:  # leaving the region: locals kept in registers go back to the frame
            for n, r in self.local_regs.items():
                self.emit(stx(8, FRAME, abi.FRAME_LOCALS + abi.SLOT * n, r))

    def reload_regs(self, height: int, only: frozenset[Reg] | None = None) -> None:
        for i in range(min(height, len(self.stack_regs))):
            r = self.stack_regs[i]
            if only is None or r in only:
                self.emit(ldx(8, r, FRAME, self.spill_off(i)))
        if only is None:  # entering a region: locals kept in registers come from the frame
            for n, r in self.local_regs.items():
                self.emit(ldx(8, r, FRAME, abi.FRAME_LOCALS + abi.SLOT * n))

    # -- leaving the region ---------------------------------------------------------------------------------
    def leave_with_state(self, fp_delta_from_frame: bool, region: RegionKey | None = None,
                         special: int | None = None) -> None:
        """``r0 = (fp [+ frame size]) << 32 | next``; exit to the dispatcher."""
        self.emit(ldx(8, T0, R10, BPF_FP_SCALAR))
        if fp_delta_from_frame:
            ins = alu(Alu.ADD, T0, 0)
            self.frame_fixups.append((ins, "imm", 1))
            self.emit(ins)
        self.emit(alu(Alu.LSH, T0, 32))
        if region is not None:
            ins = mov(T1, 0, w32=True)
            self.code.region_ref(ins, region)
            self.emit(ins, alu(Alu.OR, T0, T1), exit_())
        else:
            assert special is not None
            self.emit(mov(T1, special, w32=True), alu(Alu.OR, T0, T1), exit_())

    def next_region(self) -> None:
        """Continue at the state in T0, through the dispatcher.

        (Jumping straight to a region of the same physical function was tried: no measurable gain, and it made
        every such jump a path back into the region tree, which multiplied the verifier's work ~35x on
        wasi-libc's malloc.)"""
        self.emit(exit_())

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

    def emit_trap_stubs(self) -> None:
        entry = self.regions[0]
        for (code, origin), lab in self.trap_labels.items():
            self.code.label(lab)
            # remember which function trapped (its entry region, and the inlined callee if the trap is in one);
            # the frame chain gives the callers
            self.emit(ldx(8, T1, R10, BPF_FIBER))
            ins = st(4, T1, abi.FIBER_TRAP_REGION, 0)
            self.code.region_ref(ins, entry)
            self.emit(ins, st(8, T1, abi.FIBER_TRAP_INLINED, 0 if origin is None else origin + 1))
            self.leave_with_state(False, special=abi.SPECIAL_BASE + code)

    # -- the whole function ---------------------------------------------------------------------------------
    def compile(self) -> LoweredFunction:
        body = self.func.body
        entry = self.new_region()
        if self.leaf:
            from .dispatcher import frame_setup, leaf_name

            self.code.label(leaf_name(self.index))
            self.emit(*frame_setup(R1, R2))  # r1 = frame, r2 = fiber record (guest addresses)
        else:
            self.code.label(self.region_label(entry))
        self.prologue()
        end_label = f"f{self.index}.end"
        self.ctls.append(Ctl("func", end_label, 0, (), self.type.results, len(body) - 1))
        i = 0
        while i < len(body):
            self.pos = i
            ins = body[i]
            if self.dead and ins.op not in (Op.ELSE, Op.END):
                i = self.skip_dead(i)
                continue
            i = self.lower(i, ins)
        for label, stub in self.pending_stubs:
            self.code.label(label)
            self.code.append(stub)
        self.emit_trap_stubs()
        frame = FrameLayout(len(self.func.locals), self.max_stack)
        for ins, fld, sign in self.frame_fixups:
            setattr(ins, fld, getattr(ins, fld) + sign * frame.size)
        return LoweredFunction(self.index, self.code, self.regions, frame)

    def skip_dead(self, i: int) -> int:
        """Skip unreachable instructions up to the innermost block's ``else`` or ``end``."""
        c = self.ctls[-1]
        if c.kind == "if" and not c.in_else and c.else_index >= 0 and c.else_index > i:
            return c.else_index
        return c.end_index

    def prologue(self) -> None:
        """Function entry: check the software stack has room for the frame, zero the non-parameter locals."""
        # frames are laid out in a stack_size-aligned area, so the offset within the stack is fp & (size - 1)
        size = self.opt.stack_size
        self.emit(ldx(8, T0, R10, BPF_FP_SCALAR), alu(Alu.AND, T0, size - 1))
        limit = jmp(Jmp.JGT, T0, size - self.info.frame_margin, self.trap_label(abi.Trap.STACK_OVERFLOW))
        self.frame_fixups.append((limit, "imm", -1))
        self.emit(limit)
        for i in range(self.func.num_params, len(self.func.locals)):
            if i not in self.local_regs:
                self.emit(st(8, FRAME, abi.FRAME_LOCALS + abi.SLOT * i, 0))
        for n, r in self.local_regs.items():
            if n < self.func.num_params:
                self.emit(ldx(8, r, FRAME, abi.FRAME_LOCALS + abi.SLOT * n))
            else:
                self.emit(mov(r, 0))

    # -- dispatch over instructions -------------------------------------------------------------------------
    def lower(self, i: int, ins: Instr) -> int:
        from . import ops  # numeric and memory instructions

        op = ins.op
        handler = _CONTROL.get(op)
        if handler is not None:
            return handler(self, i, ins)
        nxt = ops.lower(self, i, ins)
        if nxt is not None:
            return nxt
        raise self.unsupported(f"instruction {_opname(op)}")

    def block_types(self, bt: BlockType) -> tuple[tuple[ValType, ...], tuple[ValType, ...]]:
        if bt.type_index is not None:
            ft = self.m.types[bt.type_index]
            return ft.params, ft.results
        return (), ((bt.result,) if bt.result is not None else ())

    # -- control flow ---------------------------------------------------------------------------------------
    def op_block(self, i: int, ins: Instr) -> int:
        params, results = self.block_types(ins.imm)  # type: ignore[arg-type]
        self.materialize_all()
        lab = self.code.fresh(f"f{self.index}.b")
        self.ctls.append(Ctl("block", lab, len(self.stack) - len(params), params, results, ins.end))
        return i + 1

    def op_loop(self, i: int, ins: Instr) -> int:
        params, results = self.block_types(ins.imm)  # type: ignore[arg-type]
        self.materialize_all()
        head = self.code.fresh(f"f{self.index}.loop")
        region = self.new_region()
        c = Ctl("loop", head, len(self.stack) - len(params), params, results, ins.end, region=region)
        self.ctls.append(c)
        # Coming in, everything goes through the frame and back, exactly as at the region entry (reached from
        # the dispatcher): values loaded from the arena are scalars the verifier does not know, so the loop's
        # states converge instead of being walked iteration by iteration from known constants.
        self.spill_regs(len(self.stack))
        self.code.label(self.region_label(region))
        self.reload_regs(len(self.stack))
        self.code.label(head)
        return i + 1

    def op_if(self, i: int, ins: Instr) -> int:
        slot, cond = self.pop()
        self.open_if(ins, lambda target: self.emit(jmp(Jmp.JEQ, self.read(slot, cond, T0), 0, target, w32=True)))
        return i + 1

    def open_if(self, ins: Instr, jump_if_false) -> None:  # type: ignore[no-untyped-def]
        """Open an ``if`` whose condition was popped; ``jump_if_false(label)`` emits the test."""
        params, results = self.block_types(ins.imm)  # type: ignore[arg-type]
        self.materialize_all()
        lab = self.code.fresh(f"f{self.index}.if")
        c = Ctl("if", lab, len(self.stack) - len(params), params, results, ins.end, ins.else_)
        c.else_label = lab + ".else"
        self.ctls.append(c)
        jump_if_false(c.else_label)

    def op_else(self, i: int, ins: Instr) -> int:
        c = self.ctls[-1]
        if not self.dead:
            self.materialize_all()
            self.emit(ja(c.label))
            c.targeted = True
        assert c.else_label is not None
        self.code.label(c.else_label)
        c.else_label = None
        c.in_else = True
        self.stack[c.base:] = [Slot(t) for t in c.params]
        self.dead = False
        return i + 1

    def op_end(self, i: int, ins: Instr) -> int:
        c = self.ctls.pop()
        reachable = not self.dead
        if reachable:
            self.materialize_all()
        if c.kind == "func":
            if reachable:
                self.do_return()
            return i + 1
        if c.else_label is not None:  # an if without else: the false path passes the params through
            self.code.label(c.else_label)
            reachable = True
        if c.kind != "loop":
            self.code.label(c.label)
            reachable = reachable or c.targeted
        self.stack[c.base:] = [Slot(t) for t in c.results]
        self.max_stack = max(self.max_stack, len(self.stack))
        self.dead = not reachable
        return i + 1

    def branch_moves(self, c: Ctl) -> None:
        """Move the values a branch to ``c`` carries into the target's slots."""
        k = len(c.branch_types)
        h = len(self.stack)
        for j in range(k):
            self.move(h - k + j, c.base + j)

    def jump_to(self, c: Ctl) -> None:
        """Jump to a label whose values are in place: a loop back-edge may suspend (or always does, without
        ``may_goto``), any other target is a plain jump."""
        if c.kind == "loop":
            assert c.region is not None
            self.jump_to_head(c.label, c.region, c.base + len(c.params))
        else:
            c.targeted = True
            self.emit(ja(c.label))

    def jump_to_head(self, head: str, region: RegionKey, height: int) -> None:
        """A loop back-edge: behind ``may_goto`` (suspending to ``region`` when it fires), or, without it,
        through the dispatcher every time."""
        if self.opt.may_goto:
            susp = self.code.fresh(f"f{self.index}.susp")
            self.emit(may_goto(susp), ja(head))
            self.stubs_suspend(susp, height, region)
        else:
            self.spill_regs(height)
            self.leave_with_state(False, region=region)

    def stubs_suspend(self, label: str, height: int, region: RegionKey) -> None:
        """Out-of-line code for a loop whose ``may_goto`` fired: save the stack and resume at the loop head."""
        saved = self.code
        stub = Code()
        self.code = stub
        self.spill_regs(height)
        # may_goto fired: this invocation has run long enough; a zero budget makes the dispatcher stop
        # (the budget left is kept in FIBER_RUN_COUNT so that the dispatcher still counts the transitions run)
        self.emit(ldx(8, T1, R10, BPF_FIBER), ldx(8, T0, T1, abi.FIBER_RUN_BUDGET), stx(8, T1, abi.FIBER_RUN_COUNT, T0),
                  st(8, T1, abi.FIBER_RUN_BUDGET, 0))
        self.leave_with_state(False, region=region)
        self.code = saved
        self.pending_stubs.append((label, stub))

    def op_br(self, i: int, ins: Instr) -> int:
        c = self.ctls[-1 - ins.imm]  # type: ignore[operator]
        self.branch(c)
        self.dead = True
        return i + 1

    def branch(self, c: Ctl) -> None:
        """An unconditional branch to ``c`` (a branch to the function body is a return)."""
        if c.kind == "func":
            self.do_return()
        else:
            self.branch_moves(c)
            self.jump_to(c)

    def op_br_if(self, i: int, ins: Instr) -> int:
        c = self.ctls[-1 - ins.imm]  # type: ignore[operator]
        slot, cond = self.pop()
        r = self.read(slot, cond, T0)
        self.branch_if(c, lambda target: self.emit(jmp(Jmp.JNE, r, 0, target, w32=True)),
                       lambda target: self.emit(jmp(Jmp.JEQ, r, 0, target, w32=True)))
        return i + 1

    def branch_if(self, c: Ctl, jump_if_true, jump_if_false) -> None:  # type: ignore[no-untyped-def]
        """A conditional branch to ``c``; the callbacks emit the test against a label."""
        k = len(c.branch_types)
        h = len(self.stack)
        needs_moves = any(h - k + j != c.base + j or isinstance(self.stack[h - k + j], Const) for j in range(k))
        if c.kind == "block" or c.kind == "if":
            if not needs_moves:
                c.targeted = True
                jump_if_true(c.label)
                return
        skip = self.code.fresh(f"f{self.index}.skip")
        jump_if_false(skip)
        saved = list(self.stack)
        self.branch(c)
        self.stack = saved
        self.code.label(skip)

    def op_br_table(self, i: int, ins: Instr) -> int:
        table = ins.imm
        slot, idx = self.pop()
        r = self.read(slot, idx, T0)
        if r != T0:
            self.emit(mov(T0, r))
        targets = list(table.labels)  # type: ignore[attr-defined]
        default = table.default  # type: ignore[attr-defined]
        # one stub per distinct target depth: moves, then the jump
        stubs: dict[int, str] = {}
        for d in [*targets, default]:
            if d not in stubs:
                stubs[d] = self.code.fresh(f"f{self.index}.bt")
        if targets:
            self.emit(jmp(Jmp.JGE, T0, len(targets), stubs[default], w32=True))
            self.bsearch(targets, 0, len(targets), stubs)
        else:  # only a default target
            self.emit(ja(stubs[default]))
        saved = list(self.stack)
        for d, lab in stubs.items():
            self.code.label(lab)
            self.stack = list(saved)
            self.branch(self.ctls[-1 - d])
        self.stack = saved
        self.dead = True
        return i + 1

    def bsearch(self, targets: list[int], lo: int, hi: int, stubs: dict[int, str]) -> None:
        """Compare tree over T0 in [lo, hi) jumping to each index's stub."""
        if hi - lo <= 3:
            for k in range(lo, hi - 1):
                self.emit(jmp(Jmp.JEQ, T0, k, stubs[targets[k]], w32=True))
            self.emit(ja(stubs[targets[hi - 1]]))
            return
        mid = (lo + hi) // 2
        upper = self.code.fresh(f"f{self.index}.bs")
        self.emit(jmp(Jmp.JGE, T0, mid, upper, w32=True))
        self.bsearch(targets, lo, mid, stubs)
        self.code.label(upper)
        self.bsearch(targets, mid, hi, stubs)

    def op_return(self, i: int, ins: Instr) -> int:
        self.do_return()
        self.dead = True
        return i + 1

    def do_return(self) -> None:
        """Results into the frame's first slots, then continue at the caller's return region."""
        m = len(self.type.results)
        h = len(self.stack)
        for j in range(m):
            slot = h - m + j
            r = self.read(slot, self.stack[slot], T0)
            self.emit(stx(8, FRAME, abi.FRAME_LOCALS + abi.SLOT * j, r))
        if self.leaf:  # back to the BPF caller: 0 means returned (anything else is a trap state)
            self.emit(mov(T0, 0), exit_())
            return
        self.emit(
            ldx(4, T1, FRAME, abi.FRAME_CALLER),
            alu(Alu.LSH, T1, 32),
            ldx(4, T0, FRAME, abi.FRAME_RETURN),
            alu(Alu.OR, T0, T1),
        )
        self.next_region()

    def op_unreachable(self, i: int, ins: Instr) -> int:
        self.trap(abi.Trap.UNREACHABLE)
        self.dead = True
        return i + 1

    def op_nop(self, i: int, ins: Instr) -> int:
        return i + 1

    # -- calls ----------------------------------------------------------------------------------------------
    def op_call(self, i: int, ins: Instr) -> int:
        callee = ins.imm
        assert isinstance(callee, int)
        ft = self.m.func_type(callee)
        if callee < self.m.num_imported_funcs:
            from . import intrinsics

            imp = [x for x in self.m.imports if x.kind == 0][callee]
            if imp.module == "env" and imp.name.startswith("invoke_") and ft.params[:1] == (ValType.I32,):
                self.invoke(ft)
                return i + 1
            why = intrinsics.check_import(imp.module, imp.name, ft)
            if why is not None:
                raise self.unsupported(f"call to imported function {imp.module}.{imp.name}: {why}")
            intrinsics.lower(self, imp.name)
            return i + 1
        if callee in self.info.leaves:
            self.leaf_call(ft, callee)
        else:
            self.call_sequence(ft, RegionKey(callee, 0), None)
        return i + 1

    def op_call_indirect(self, i: int, ins: Instr) -> int:
        type_index, table = ins.imm  # type: ignore[misc]
        ft = self.m.types[type_index]
        slot, idx = self.pop()
        self.indirect_target(slot, idx, ft, table)
        self.call_sequence(ft, None, BPF_CALL_REGION)
        return i + 1

    def invoke(self, ft: FuncType) -> None:
        """``invoke_*(fn, args...)`` (clang's setjmp/longjmp lowering): call table[fn] with the arguments in a
        frame an unwind stops at; after a longjmp the call returns as if normally and the caller looks at
        ``__THREW__``."""
        callee_type = FuncType(ft.params[1:], ft.results)
        h = len(self.stack)
        fn_slot = h - len(ft.params)
        self.materialize(fn_slot)
        self.indirect_target(fn_slot, self.stack[fn_slot], callee_type, 0)
        self.call_sequence(callee_type, None, BPF_CALL_REGION, consumed_below=1, catch=True)

    def indirect_target(self, slot: int, idx: Entry, ft: FuncType, table: int) -> None:
        """Check table[idx] (in range, not null, of type ``ft``) and leave its entry region at BPF_CALL_REGION."""
        r = self.read(slot, idx, T0)
        if r != T0:
            self.emit(mov(T0, r))
        # bounds: the table's current size lives in the control block
        self.emit(ldx(8, T1, R10, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_TABLE0_SIZE + 8 * table))
        self.emit(jmp(Jmp.JGE, T0, T1, self.trap_label(abi.Trap.UNDEFINED_ELEMENT)))
        # element: function index + 1 (0 = null)
        self.emit(alu(Alu.LSH, T0, 3), alu(Alu.ADD, T0, abi.TABLES - abi.RT_BASE + table * abi.TABLE_STRIDE),
                  ldx(8, T1, R10, BPF_RUNTIME), alu(Alu.ADD, T1, T0), ldx(4, T0, T1, 0))
        self.emit(jmp(Jmp.JEQ, T0, 0, self.trap_label(abi.Trap.INDIRECT_NULL)))
        # function info: entry region | type id << 32
        self.emit(alu(Alu.SUB, T0, 1), alu(Alu.LSH, T0, 3), alu(Alu.ADD, T0, abi.FUNC_INFO - abi.RT_BASE),
                  ldx(8, T1, R10, BPF_RUNTIME), alu(Alu.ADD, T1, T0), ldx(8, T0, T1, 0),
                  mov(T1, T0), alu(Alu.RSH, T1, 32))
        type_id = self.info.type_ids.get(ft)
        if type_id is None:  # no function of the module has this type: every such call is a mismatch
            self.trap(abi.Trap.INDIRECT_TYPE)
        else:
            self.emit(jmp(Jmp.JNE, T1, type_id, self.trap_label(abi.Trap.INDIRECT_TYPE)))
        # the callee's entry region is in the low half of T0; keep it on the BPF stack across the stores
        self.emit(stx(8, R10, BPF_CALL_REGION, T0))

    def callee_frame(self, ins: Insn) -> Insn:
        """An access to the callee's frame, which starts where ours ends: its offset gets our frame size."""
        self.frame_fixups.append((ins, "off", 1))
        return ins

    def write_args(self, base: int, k: int) -> None:
        """The arguments (slots base..base+k) into the callee's frame as its first locals."""
        for j in range(k):
            slot = base + j
            r = self.read(slot, self.stack[slot], T0)
            self.emit(self.callee_frame(stx(8, FRAME, abi.FRAME_LOCALS + abi.SLOT * j, r)))

    def take_results(self, ft: FuncType) -> None:
        """Push the callee's results, which it left over its first locals."""
        for j, t in enumerate(ft.results):
            slot = self.push(Slot(t))
            dst = self.dst(slot)
            self.emit(self.callee_frame(ldx(8, dst, FRAME, abi.FRAME_LOCALS + abi.SLOT * j)))
            if self.home(slot) is None:
                self.emit(stx(8, FRAME, self.spill_off(slot), dst))

    def call_sequence(self, ft: FuncType, callee: RegionKey | None, region_on_stack: int | None, *,
                      consumed_below: int = 0, catch: bool = False) -> None:
        """Build the callee's frame after ours, save our stack, and continue at the callee's entry region.

        ``consumed_below`` more slots under the arguments are consumed too (an invoke's function pointer).
        With ``catch`` the callee's frame is marked as one an unwind (longjmp) stops at: its header keeps the
        C stack pointer, or'ed with 1, in the word after the return region."""
        k = len(ft.params)
        base = len(self.stack) - k
        frame_insn = self.callee_frame
        self.write_args(base, k)
        self.materialize_all_below(base)
        self.spill_regs(base)
        cont = self.new_region()
        self.emit(ldx(8, T0, R10, BPF_FP_SCALAR), frame_insn(stx(8, FRAME, abi.FRAME_CALLER, T0)))
        ins = st(4, FRAME, abi.FRAME_RETURN, 0)
        self.code.region_ref(ins, cont)
        self.emit(frame_insn(ins))
        if catch:
            sp = self.info.stack_pointer_global
            if sp is not None:
                base_reg, off = self.global_addr(sp)
                self.emit(ldx(8, T0, base_reg, off), alu(Alu.OR, T0, 1, w32=True))
            else:
                self.emit(mov(T0, 1))
            self.emit(frame_insn(stx(4, FRAME, abi.FRAME_RETURN + 4, T0)))
        else:
            self.emit(frame_insn(st(4, FRAME, abi.FRAME_RETURN + 4, 0)))
        # state = (fp + frame size) << 32 | callee entry
        self.emit(ldx(8, T0, R10, BPF_FP_SCALAR))
        add = alu(Alu.ADD, T0, 0)
        self.frame_fixups.append((add, "imm", 1))
        self.emit(add, alu(Alu.LSH, T0, 32))
        if callee is not None:
            ins = mov(T1, 0, w32=True)
            self.code.region_ref(ins, callee)
            self.emit(ins)
        else:
            assert region_on_stack is not None
            self.emit(ldx(4, T1, R10, region_on_stack))
        self.emit(alu(Alu.OR, T0, T1))
        self.next_region()
        # the continuation: reload our stack, take the results from the callee's frame
        self.code.label(self.region_label(cont))
        base -= consumed_below
        self.stack[base:] = []
        self.reload_regs(base)
        self.take_results(ft)

    def leaf_call(self, ft: FuncType, callee: int) -> None:
        """Call a leaf as a plain BPF function: its frame after ours (as for any call), arguments in it, and
        only our caller-saved stack registers saved around the call."""
        from capsule.bpf.asm import call

        from .dispatcher import leaf_name

        k = len(ft.params)
        base = len(self.stack) - k
        frame_insn = self.callee_frame
        self.write_args(base, k)
        self.materialize_all_below(base)
        self.spill_regs(base, only=CALLER_SAVED)
        # the header makes the leaf's frame part of the chain a backtrace walks (any region of ours names us)
        ins = st(4, FRAME, abi.FRAME_RETURN, 0)
        self.code.region_ref(ins, self.regions[0])
        self.emit(ldx(8, R1, R10, BPF_FP_SCALAR), frame_insn(stx(8, FRAME, abi.FRAME_CALLER, R1)),
                  frame_insn(ins), frame_insn(st(4, FRAME, abi.FRAME_RETURN + 4, 0)))
        add = alu(Alu.ADD, R1, 0)
        self.frame_fixups.append((add, "imm", 1))
        self.emit(add, ldx(8, R2, R10, BPF_FIBER_SCALAR), call(leaf_name(callee)))
        self.emit(jmp(Jmp.JNE, T0, 0, self.propagate_label()))
        self.stack[base:] = []
        self.reload_regs(base, only=CALLER_SAVED)
        self.take_results(ft)

    def propagate_label(self) -> str:
        """Where a leaf's trap state (in r0) leaves this region for the dispatcher."""
        lab = f"f{self.index}.propagate"
        if not any(lab == x for x, _ in self.pending_stubs):
            stub = Code()
            stub.emit(exit_())
            self.pending_stubs.append((lab, stub))
        return lab

    def materialize_all_below(self, height: int) -> None:
        for i in range(height):
            self.materialize(i)

    # -- locals and globals ---------------------------------------------------------------------------------
    def op_local_get(self, i: int, ins: Instr) -> int:
        n = ins.imm
        assert isinstance(n, int)
        slot = self.push(Slot(self.func.locals[n]))
        dst = self.dst(slot)
        lr = self.local_regs.get(n)
        self.emit(mov(dst, lr) if lr is not None else ldx(8, dst, FRAME, abi.FRAME_LOCALS + abi.SLOT * n))
        if self.home(slot) is None:
            self.emit(stx(8, FRAME, self.spill_off(slot), dst))
        return i + 1

    def set_local(self, n: int, keep: bool) -> None:
        slot = len(self.stack) - 1
        e = self.stack[slot]
        off = abi.FRAME_LOCALS + abi.SLOT * n
        lr = self.local_regs.get(n)
        if lr is not None:
            self.read_into(lr, slot, e)
        elif isinstance(e, Const) and fits_imm32(_sext_const(e)):
            self.emit(st(8, FRAME, off, _sext_const(e)))
        else:
            r = self.read(slot, e, T0)
            self.emit(stx(8, FRAME, off, r))
        if not keep:
            self.stack.pop()

    def op_local_set(self, i: int, ins: Instr) -> int:
        self.set_local(ins.imm, keep=False)  # type: ignore[arg-type]
        return i + 1

    def op_local_tee(self, i: int, ins: Instr) -> int:
        self.set_local(ins.imm, keep=True)  # type: ignore[arg-type]
        return i + 1

    def global_addr(self, g: int) -> tuple[Reg, int]:
        """Load the base pointer for global ``g`` into T1; returns (base, offset)."""
        if g == self.info.stack_pointer_global:
            self.emit(ldx(8, T1, R10, BPF_FIBER))
            return T1, abi.FIBER_STACK_POINTER
        off = abi.GLOBALS - abi.RT_BASE + abi.SLOT * g
        self.emit(ldx(8, T1, R10, BPF_RUNTIME))
        if off >= 1 << 15:
            self.emit(alu(Alu.ADD, T1, off))
            off = 0
        return T1, off

    def op_global_get(self, i: int, ins: Instr) -> int:
        g = ins.imm
        assert isinstance(g, int)
        t = self.m.all_globals()[g].type
        slot = self.push(Slot(t))
        base, off = self.global_addr(g)
        dst = self.dst(slot)
        self.emit(ldx(8, dst, base, off))
        if self.home(slot) is None:
            self.emit(stx(8, FRAME, self.spill_off(slot), dst))
        return i + 1

    def op_global_set(self, i: int, ins: Instr) -> int:
        g = ins.imm
        assert isinstance(g, int)
        slot, e = self.pop()
        r = self.read(slot, e, T0)
        base, off = self.global_addr(g)
        self.emit(stx(8, base, off, r))
        return i + 1

    def op_drop(self, i: int, ins: Instr) -> int:
        self.pop()
        return i + 1

    def op_select(self, i: int, ins: Instr) -> int:
        cs, cond = self.pop()
        bs, b = self.pop()
        a_slot = len(self.stack) - 1
        a = self.stack[a_slot]
        t = a.type
        dst = self.dst(a_slot)
        self.read_into(dst, a_slot, a)
        rc = self.read(cs, cond, T1)
        skip = self.code.fresh(f"f{self.index}.sel")
        self.emit(jmp(Jmp.JNE, rc, 0, skip, w32=True))
        self.emit(mov(dst, self.read(bs, b, T1)))
        self.code.label(skip)
        self.finish(a_slot, dst, t)
        return i + 1


def _sext_const(c: Const) -> int:
    if is64(c.type):
        v = c.bits & 0xFFFF_FFFF_FFFF_FFFF
        return v - (1 << 64) if v >> 63 else v
    v = c.bits & 0xFFFF_FFFF
    return v if v < (1 << 31) else v + (1 << 64)  # positive 64-bit pattern: not an imm unless small


def _opname(op: int) -> str:
    from capsule.wasm import op_name

    return op_name(op)


_CONTROL = {
    Op.BLOCK: FunctionCompiler.op_block,
    Op.LOOP: FunctionCompiler.op_loop,
    Op.IF: FunctionCompiler.op_if,
    Op.ELSE: FunctionCompiler.op_else,
    Op.END: FunctionCompiler.op_end,
    Op.BR: FunctionCompiler.op_br,
    Op.BR_IF: FunctionCompiler.op_br_if,
    Op.BR_TABLE: FunctionCompiler.op_br_table,
    Op.RETURN: FunctionCompiler.op_return,
    Op.UNREACHABLE: FunctionCompiler.op_unreachable,
    Op.NOP: FunctionCompiler.op_nop,
    Op.CALL: FunctionCompiler.op_call,
    Op.CALL_INDIRECT: FunctionCompiler.op_call_indirect,
    Op.LOCAL_GET: FunctionCompiler.op_local_get,
    Op.LOCAL_SET: FunctionCompiler.op_local_set,
    Op.LOCAL_TEE: FunctionCompiler.op_local_tee,
    Op.GLOBAL_GET: FunctionCompiler.op_global_get,
    Op.GLOBAL_SET: FunctionCompiler.op_global_set,
    Op.DROP: FunctionCompiler.op_drop,
    Op.SELECT: FunctionCompiler.op_select,
    Op.SELECT_T: FunctionCompiler.op_select,
}

__all__ = ["CompileError", "FunctionCompiler", "LoweredFunction", "ModuleInfo", "CALLER_SAVED"]
