"""Calls: direct and indirect calls through the software stack, calls of leaf functions as BPF calls,
clang's ``env.invoke_*`` (setjmp/longjmp), and ``capsule.*`` imports (``intrinsics``).

A call through the software stack builds the callee's frame right after the caller's (arguments as its first
locals, the caller's frame pointer and the region to continue at in its header), saves the caller's operand
stack to the frame, and leaves the region with the callee's entry as the next state. The continuation is a
region of the caller: it reloads the stack and takes the results from the callee's frame.
"""

from __future__ import annotations

from capsule.bpf.asm import FP, R0, R1, R2, alu, call, exit_, ja, jmp, ldx, may_goto, mov, st, stx
from capsule.bpf.opcodes import Alu, Jmp
from capsule.wasm import ExternKind, FuncType, Instr, Op, ValType

from . import abi, intrinsics
from .abi import BPF_CALL_REGION, BPF_FIBER, BPF_FIBER_SCALAR, BPF_FP_SCALAR, BPF_MEM_BYTES, BPF_RUNTIME
from .code import Code, RegionKey
from .dispatcher import leaf_name, match_tree, phys_name
from .emit import T0, T1
from .state import FunctionState, LoweredFunction, Lowering
from .values import CALLER_SAVED, FRAME, Entry, Slot, load_frame, store_frame
from .variables import global_addr
from .window import Window


def call_(fs: FunctionState, ins: Instr) -> None:
    callee = ins.imm_as(int)
    ft = fs.m.func_type(callee)
    if callee < fs.m.num_imported_funcs:
        imp = [x for x in fs.m.imports if x.kind == ExternKind.FUNC][callee]
        if imp.module == "env" and imp.name.startswith("invoke_") and ft.params[:1] == (ValType.I32,):
            invoke(fs, ft)
            return
        why = intrinsics.check_import(imp.module, imp.name, ft)
        if why is not None:
            raise fs.unsupported(f"call to imported function {imp.module}.{imp.name}: {why}")
        intrinsics.lower(fs, imp.name)
        return
    if callee in fs.info.leaves:
        leaf_call(fs, ft, callee)
    else:
        call_sequence(fs, ft, RegionKey(callee, 0), None)


def call_indirect(fs: FunctionState, ins: Instr) -> None:
    type_index, table = ins.imm_pair()
    ft = fs.m.types[type_index]
    slot, idx = fs.stack.pop()
    indirect_target(fs, slot, idx, ft, table)
    call_sequence(fs, ft, None, BPF_CALL_REGION)


def invoke(fs: FunctionState, ft: FuncType) -> None:
    """``invoke_*(fn, args...)`` (clang's setjmp/longjmp lowering): call table[fn] with the arguments in a
    frame an unwind stops at; after a longjmp the call returns as if normally and the caller looks at
    ``__THREW__``."""
    callee_type = FuncType(ft.params[1:], ft.results)
    h = len(fs.stack)
    fn_slot = h - len(ft.params)
    fs.stack.materialize(fn_slot)
    indirect_target(fs, fn_slot, fs.stack[fn_slot], callee_type, 0)
    call_sequence(fs, callee_type, None, BPF_CALL_REGION, consumed_below=1, catch=True)


def indirect_target(fs: FunctionState, slot: int, idx: Entry, ft: FuncType, table: int) -> None:
    """Check table[idx] (in range, not null, of type ``ft``) and leave its entry region at BPF_CALL_REGION."""
    r = fs.stack.read(slot, idx, T0)
    if r != T0:
        fs.emit(mov(T0, r))
    # bounds: the table's current size lives in the control block
    fs.emit(ldx(8, T1, FP, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_TABLE0_SIZE + 8 * table))
    fs.emit(jmp(Jmp.JGE, T0, T1, fs.trap_label(abi.Trap.UNDEFINED_ELEMENT)))
    # element: function index + 1 (0 = null)
    fs.emit(alu(Alu.LSH, T0, 3), alu(Alu.ADD, T0, abi.TABLES - abi.RT_BASE + table * abi.TABLE_STRIDE),
            *fs.info.window.bounded("runtime", T0), ldx(8, T1, FP, BPF_RUNTIME), alu(Alu.ADD, T1, T0),
            ldx(4, T0, T1, 0))
    fs.emit(jmp(Jmp.JEQ, T0, 0, fs.trap_label(abi.Trap.INDIRECT_NULL)))
    # function info: entry region | type id << 32
    fs.emit(alu(Alu.SUB, T0, 1), alu(Alu.LSH, T0, 3), alu(Alu.ADD, T0, abi.FUNC_INFO - abi.RT_BASE),
            *fs.info.window.bounded("runtime", T0), ldx(8, T1, FP, BPF_RUNTIME), alu(Alu.ADD, T1, T0),
            ldx(8, T0, T1, 0), mov(T1, T0), alu(Alu.RSH, T1, 32))
    type_id = fs.info.type_ids.get(ft)
    if type_id is None:  # no function of the module has this type: every such call is a mismatch
        fs.trap(abi.Trap.INDIRECT_TYPE)
    else:
        fs.emit(jmp(Jmp.JNE, T1, type_id, fs.trap_label(abi.Trap.INDIRECT_TYPE)))
    # the callee's entry region is in the low half of T0; keep it on the BPF stack across the stores
    fs.emit(stx(8, FP, BPF_CALL_REGION, T0))


def write_args(fs: FunctionState, base: int, k: int) -> None:
    """The arguments (slots base..base+k) into the callee's frame as its first locals."""
    for j in range(k):
        slot = base + j
        r = fs.stack.read(slot, fs.stack[slot], T0)
        fs.emit(fs.callee_frame(store_frame(abi.FRAME_LOCALS + abi.SLOT * j, r)))


def take_results(fs: FunctionState, ft: FuncType) -> None:
    """Push the callee's results, which it left over its first locals."""
    for j, t in enumerate(ft.results):
        slot = fs.stack.push(Slot(t))
        dst = fs.stack.dst(slot)
        fs.emit(fs.callee_frame(load_frame(dst, abi.FRAME_LOCALS + abi.SLOT * j)))
        if fs.stack.home(slot) is None:
            fs.emit(store_frame(fs.stack.spill_off(slot), dst))


def call_sequence(fs: FunctionState, ft: FuncType, callee: RegionKey | None, region_on_stack: int | None, *,
                  consumed_below: int = 0, catch: bool = False) -> None:
    """Build the callee's frame after ours, save our stack, and continue at the callee's entry region.

    ``consumed_below`` more slots under the arguments are consumed too (an invoke's function pointer).
    With ``catch`` the callee's frame is marked as one an unwind (longjmp) stops at: its header keeps the
    C stack pointer, or'ed with 1, in the word after the return region."""
    k = len(ft.params)
    base = len(fs.stack) - k
    frame_insn = fs.callee_frame
    write_args(fs, base, k)
    fs.stack.materialize_below(base)
    fs.stack.spill_regs(base)
    cont = fs.new_region()
    fs.emit(ldx(8, T0, FP, BPF_FP_SCALAR), frame_insn(store_frame(abi.FRAME_CALLER, T0)))
    # the return region and, unless it is a catching frame, the zero word after it: one 8-byte store (the
    # immediate is sign-extended, and region ids are below 2^31)
    ins = st(4 if catch else 8, FRAME, abi.FRAME_RETURN, 0)
    fs.code.region_ref(ins, cont)
    fs.emit(frame_insn(ins))
    if catch:
        sp = fs.info.stack_pointer_global
        if sp is not None:
            base_reg, off = global_addr(fs, sp)
            fs.emit(ldx(8, T0, base_reg, off), alu(Alu.OR, T0, 1, w32=True))
        else:
            fs.emit(mov(T0, 1))
        fs.emit(frame_insn(stx(4, FRAME, abi.FRAME_RETURN + 4, T0)))
    # state = (fp + frame size) << 32 | callee entry
    fs.emit(ldx(8, T0, FP, BPF_FP_SCALAR), fs.frame_relative(alu(Alu.ADD, T0, 0), "imm"))
    direct = callee is not None and fs.info.direct(fs.index, callee.func)
    if callee is not None and not direct and fs.info.nested(fs.index, callee.func):
        nested_call(fs, callee, cont)
    if direct:
        assert callee is not None
        # the callee is in this physical function: enter it here, its frame set up as the prologue would
        # (the frame pointer masked to 32 bits, the range the prologue gives it, so that the verifier's
        # states at the callee's entry prune). The call is charged to the invocation's budget like a trip
        # through the dispatcher (every register is free here: the stack was saved); may_goto bounds the
        # chain of such jumps for the verifier (recursion)
        through = fs.fresh("dcall")
        fs.emit(mov(T0, T0, w32=True), ldx(8, T1, FP, BPF_FIBER), ldx(8, R1, T1, abi.FIBER_RUN_BUDGET),
                jmp(Jmp.JEQ, R1, 0, through), alu(Alu.SUB, R1, 1), stx(8, T1, abi.FIBER_RUN_BUDGET, R1),
                stx(8, FP, BPF_FP_SCALAR, T0), *fs.info.window.pointer("stack", FRAME, T0), ja(callee.label))
        fs.code.label(through)
    fs.emit(alu(Alu.LSH, T0, 32))
    if callee is not None:
        ins = mov(T1, 0, w32=True)
        fs.code.region_ref(ins, callee)
        fs.emit(ins)
    else:
        assert region_on_stack is not None
        fs.emit(ldx(4, T1, FP, region_on_stack))
    fs.emit(alu(Alu.OR, T0, T1))
    fs.next_region()
    if direct:
        assert callee is not None
        # the callee's return jumps here (``return_stub``, whose may_goto bounds chains of returns) with our
        # frame pointer in T1 (the first ``direct_entry_insns`` instructions from the label)
        fs.code.label(direct_entry(cont))
        fs.emit(stx(8, FP, BPF_FP_SCALAR, T1), *fs.info.window.pointer("stack", FRAME, T1))
        fs.direct_calls.append((callee.func, cont))
    # the continuation: reload our stack, take the results from the callee's frame
    fs.code.label(cont.label)
    base -= consumed_below
    fs.stack.truncate(base)
    fs.stack.reload_regs(base)
    take_results(fs, ft)


def direct_entry_insns(win: Window) -> int:
    """The instructions of a direct entry, from its label: the frame pointer's store and FRAME made from it
    (one instruction on the arena, three on the map tier)."""
    return 1 + len(win.pointer("stack", FRAME, T1))


def nested_call(fs: FunctionState, callee: RegionKey, cont: RegionKey) -> None:
    """Run the callee's physical function as a BPF function, with the callee's entry as its state (T0 holds
    the callee's frame pointer): it returns the next state, which is our continuation when the callee has
    returned without suspending; then we go on there without the dispatcher. Any other state (the callee
    called through the software stack, suspended, trapped) is the fiber's next, and we leave with it: our
    stack is saved and the continuation waits in the callee's frame, as for any call. Charged to the budget
    like a trip through the dispatcher; when it is used up the call goes through the dispatcher."""
    assert fs.info.plan is not None
    through = fs.fresh("ncall")
    fs.emit(mov(T1, T0), ldx(8, R1, FP, BPF_FIBER), ldx(8, R2, R1, abi.FIBER_RUN_BUDGET),
            jmp(Jmp.JEQ, R2, 0, through), alu(Alu.SUB, R2, 1), stx(8, R1, abi.FIBER_RUN_BUDGET, R2),
            mov(R1, T1), alu(Alu.LSH, R1, 32))
    ins = mov(R2, 0, w32=True)
    fs.code.region_ref(ins, callee)
    fs.emit(ins, alu(Alu.OR, R1, R2), ldx(8, R2, FP, BPF_FIBER_SCALAR),
            call(phys_name(fs.info.plan.phys_of[callee.func])))
    # back: r0 is the next state; ours is (fp << 32 | continuation)
    fs.emit(ldx(8, T1, FP, BPF_FP_SCALAR), alu(Alu.LSH, T1, 32))
    ins = mov(R1, 0, w32=True)
    fs.code.region_ref(ins, cont)
    fs.emit(ins, alu(Alu.OR, T1, R1), jmp(Jmp.JNE, T0, T1, _propagate_label(fs)))
    # the callee may have grown memory (within the committed pages): our copy of the size follows
    fs.emit(ldx(8, T1, FP, BPF_RUNTIME), ldx(8, T1, T1, abi.CTRL_MEM_BYTES), stx(8, FP, BPF_MEM_BYTES, T1),
            ja(cont.label))
    fs.code.label(through)


def direct_entry(cont: RegionKey) -> str:
    """The label a directly called callee returns to: the continuation, entered with the frame pointer in T1.
    Its code starts at ``direct_entry(cont) + ".slow"``."""
    return cont.label + ".direct"


def direct_callee_entry(fs: FunctionState, entry: RegionKey) -> None:
    """The entry of a function callers of its physical function jump to. A recursive one starts with a
    may_goto, which bounds chains of direct calls (when it fires, the call continues through the dispatcher);
    any other needs none (``return_stub`` says why not everywhere)."""
    if fs.index not in fs.info.direct_recursive:
        return
    slow = fs.fresh("entry.slow")
    fs.emit(may_goto(slow))
    stub = Code()
    stub.emit(ldx(8, T0, FP, BPF_FP_SCALAR), alu(Alu.LSH, T0, 32))
    ins = mov(T1, 0, w32=True)
    stub.region_ref(ins, entry)
    stub.emit(ins, alu(Alu.OR, T0, T1), exit_())
    fs.pending_stubs.append((slow, stub))


def return_label(func: int) -> str:
    return f"f{func}.return"


def leave_return(fs: FunctionState) -> None:
    """Continue at the caller's return region: T1 = the caller's frame pointer, T0 = that region. A function
    that callers of its own physical function call directly goes through its ``return_stub``, which jumps
    straight back to them; any other returns through the dispatcher."""
    fs.emit(ldx(4, T1, FRAME, abi.FRAME_CALLER), ldx(4, T0, FRAME, abi.FRAME_RETURN))
    if fs.index in fs.info.direct_returners:
        fs.emit(ja(return_label(fs.index)))
        return
    fs.emit(alu(Alu.LSH, T1, 32), alu(Alu.OR, T0, T1))
    fs.next_region()


def return_stub(func: int, conts: list[tuple[int, str]], *, bounded: bool) -> Code:
    """``func``'s returns, once region ids are known: a compare tree over the continuations its callers in this
    physical function wait at (``(region id, label)``), jumping straight to the one in T0; any other region
    (a caller elsewhere, the host) through the dispatcher. A recursive ``func`` (``bounded``) starts with a
    may_goto, which bounds chains of returns: every cycle through returns passes here (when it fires, the
    continuation is left to the dispatcher). Without recursion there is no such cycle, and no may_goto: each
    one costs the kernel a rewrite of the whole program at load (an O(program) patch)."""
    code = Code()
    out = f"f{func}.return.out"
    code.label(return_label(func))
    if bounded:
        code.emit(may_goto(out))
    match_tree(code, T0, sorted(conts), out, f"f{func}.return", linear=3)
    code.label(out)
    code.emit(alu(Alu.LSH, T1, 32), alu(Alu.OR, T0, T1), exit_())
    return code


def leaf_call(fs: FunctionState, ft: FuncType, callee: int) -> None:
    """Call a leaf as a plain BPF function: its frame after ours (as for any call), arguments in it, and
    only our caller-saved stack registers saved around the call."""
    k = len(ft.params)
    base = len(fs.stack) - k
    frame_insn = fs.callee_frame
    write_args(fs, base, k)
    fs.stack.materialize_below(base)
    fs.stack.spill_regs(base, only=CALLER_SAVED)
    # the header makes the leaf's frame part of the chain a backtrace walks (any region of ours names us)
    ins = st(8, FRAME, abi.FRAME_RETURN, 0)  # and the zero word after the region (``call_sequence``)
    fs.code.region_ref(ins, fs.regions[0])
    fs.emit(ldx(8, R1, FP, BPF_FP_SCALAR), frame_insn(store_frame(abi.FRAME_CALLER, R1)), frame_insn(ins))
    fs.emit(fs.frame_relative(alu(Alu.ADD, R1, 0), "imm"), ldx(8, R2, FP, BPF_FIBER_SCALAR),
            call(leaf_name(callee)))
    fs.emit(jmp(Jmp.JNE, T0, 0, _propagate_label(fs)))
    fs.stack.truncate(base)
    fs.stack.reload_regs(base, only=CALLER_SAVED)
    take_results(fs, ft)


def _propagate_label(fs: FunctionState) -> str:
    """Where a leaf's trap state (in r0) leaves this region for the dispatcher."""
    lab = f"f{fs.index}.propagate"
    if not any(lab == x for x, _ in fs.pending_stubs):
        stub = Code()
        stub.emit(exit_())
        fs.pending_stubs.append((lab, stub))
    return lab


def leaf_stub(f: LoweredFunction) -> LoweredFunction:
    """The entry region of a leaf: call it, then return to our caller like any function (or pass on a trap)."""
    code = Code()
    code.label(f.regions[0].label)
    code.emit(ldx(8, R1, FP, BPF_FP_SCALAR), ldx(8, R2, FP, BPF_FIBER_SCALAR), call(leaf_name(f.index)),
              jmp(Jmp.JEQ, R0, 0, 1), exit_(),
              ldx(4, T1, FRAME, abi.FRAME_CALLER), alu(Alu.LSH, T1, 32), ldx(4, T0, FRAME, abi.FRAME_RETURN),
              alu(Alu.OR, T0, T1), exit_())
    return LoweredFunction(f.index, code, f.regions[:1], f.frame)


LOWERINGS: dict[int, Lowering] = {Op.CALL: call_, Op.CALL_INDIRECT: call_indirect}
