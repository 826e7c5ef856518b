"""The hook entry program: the guest's packet handler called on every packet an XDP or tc hook sees.

``capsule_hook(ctx)`` runs the handler the guest exports as ``capsule_packet(packet, length, info)``
(``hook_abi``) on the fiber of the CPU it runs on, so every CPU runs guest code at once over shared globals
and heap. Per packet it

1. copies up to the snap length of the packet into the fiber's buffer in linear memory, and fills the fiber's
   packet-info record (the packet pointer itself never enters guest memory: it stays in registers and on the
   BPF stack, and everything the guest sees is a copy);
2. builds the handler's first frame on the fiber's software stack and runs the dispatcher loop with the
   configured budget, charged by every region and every loop iteration (``control.jump_to_head``), so a
   handler that loops for ever ends with its budget, not after ``may_goto``'s quarter of a second;
3. returns the handler's verdict, writing the buffer back into the packet if the handler said it changed it;
   a budget exhaustion, a trap, an exit or a verdict the hook lacks give the configured default verdict
   instead, are counted, and (all but the last) reported on the ring buffer with the guest backtrace.

Nothing carries over from one packet to the next on a fiber but what the guest keeps in memory: the frame,
the C stack pointer and the state are set afresh, so an abandoned packet leaves nothing behind. What a
non-sleepable program cannot do (allocate arena pages) the host has done before attaching: a ``memory.grow``
past the committed pages fails (-1), and a yield is resumed at once (there is no host to serve it).

``capsule_emit(fd, addr, len, fiber)`` is the other half: a global function that the ``capsule.emit``
intrinsic calls to copy guest output into a record of the ring buffer (a full ring drops the record and
counts it; it never blocks).
"""

from __future__ import annotations

import json

from capsule.bpf.asm import FP as R10
from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    Reg,
    addr_space_cast,
    alu,
    atomic,
    call_helper,
    cmpxchg,
    exit_,
    ja,
    jmp,
    ld_map_fd,
    ldx,
    may_goto,
    mov,
    st,
    stx,
)
from capsule.bpf.btf import BTF
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Atomic, Jmp
from capsule.bpf.spec import MapSpec
from capsule.bpf.uapi import AttachType, Helper, MapType, ProgFlags, ProgType
from capsule.wasm import VARS_SECTION, ExternKind, FuncType, Module, ValType

from . import abi
from . import hook_abi as h
from .code import Code, RegionKey
from .dispatcher import PHYS_MASK, Layout, call_tree
from .options import Options
from .state import CompileError

# how each hook's entry program is declared: (ELF section, type, flags, expected attach type). XDP programs
# take multi-buffer packets (frames larger than a page, e.g. on a veth with a 9000-byte MTU in native mode):
# the handler gets the linear part, ``info->len`` says how long the whole packet is
PROGRAM_TYPES = {"xdp": ("xdp.frags", ProgType.XDP, ProgFlags.XDP_HAS_FRAGS, AttachType.XDP),
                 "tc": ("tc", ProgType.SCHED_CLS, 0, 0)}
EMIT_FUNC = "capsule_emit"  # the global function behind the capsule.emit intrinsic
COPY_BLOCK = 64  # bytes the packet copy moves per step, as eight word loads and stores
HANDLER_TYPE = FuncType((ValType.I32, ValType.I32, ValType.I32), (ValType.I32,))

# the entry program's BPF stack (BPF_ENTRY_FIBER is where the dispatcher's calls find the fiber)
S_FIBER = abi.BPF_ENTRY_FIBER
S_BUDGET = -16  # the packet's budget
S_CTX = -24  # the context (xdp_md or __sk_buff)
S_CPU = -32  # the CPU, which is the fiber
S_FP = -40  # the handler's frame (guest address)
S_CAPTURED = -48  # bytes copied into the buffer
S_ACTION = -56  # the action the program returns
S_LEN = -64  # the packet's length
S_EV_KIND, S_EV_CODE, S_EV_REGION, S_EV_FP = -72, -80, -88, -96  # an event on its way to the ring

# the context's fields: (data, data_end) and the info record's sources
XDP_DATA, XDP_DATA_END, XDP_IFINDEX, XDP_QUEUE = 0, 4, 12, 16
SKB_LEN, SKB_QUEUE, SKB_PROTOCOL, SKB_IFINDEX = 0, 12, 16, 40


def handler_index(m: Module) -> int:
    """The function the guest exports as its packet handler; a clear error when it has none or it has
    another type."""
    for e in m.exports:
        if e.kind == ExternKind.FUNC and e.name == h.HANDLER_EXPORT:
            if m.func_type(e.index) != HANDLER_TYPE:
                raise CompileError(f"the packet handler {h.HANDLER_EXPORT} has type {m.func_type(e.index)}, "
                                   f"not {HANDLER_TYPE} (packet, length, info -> verdict)")
            if e.index < m.num_imported_funcs:
                raise CompileError(f"the packet handler {h.HANDLER_EXPORT} is an import")
            return e.index
    raise CompileError(f"a hook program must export its packet handler as {h.HANDLER_EXPORT!r} "
                       "(CAPSULE_HANDLER in capsule_hook.h)")


def check_layout(layout: Layout) -> None:
    if layout.split:
        raise CompileError("a hook program must fit one BPF program: this one is split across several "
                           "(build it smaller, e.g. with -Os)")


def maps(opt: Options) -> dict[str, MapSpec]:
    return {h.RING_MAP: MapSpec(h.RING_MAP, MapType.RINGBUF, 0, 0, h.RING_SIZE)}


def describe(opt: Options, handler: int, m: Module) -> bytes:
    """The ``.capsule.hook`` section: what the host needs to know to prepare and attach the object, with the
    sizes of the program's global variables when its build recorded them (custom section VARS_SECTION)."""
    assert opt.hook is not None
    variables: dict[str, int] = {}
    for sec in m.custom(VARS_SECTION):
        try:
            got = json.loads(bytes(sec.data))
        except ValueError:
            raise CompileError(f"the module's {VARS_SECTION} section is not JSON") from None
        variables.update({str(k): int(v) for k, v in got.items()})
    return json.dumps({"version": 1, "hook": opt.hook, "handler": handler, "pkt_max": h.PKT_MAX,
                       "vars": variables}).encode()


def entry(kind: str, layout: Layout, opt: Options, handler: RegionKey) -> Code:
    """``int capsule_hook(ctx)`` for hook ``kind``; ``handler`` is the handler's entry region."""
    check_layout(layout)
    code = Code()
    code.label(h.HOOK_PROGRAM)
    code.emit(stx(8, R10, S_CTX, R1),
              ld_map_fd(R1, abi.WINDOW_MAP),  # the arena is this program's (addr_space_cast needs that)
              call_helper(Helper.GET_SMP_PROCESSOR_ID), mov(R9, R0, w32=True), stx(8, R10, S_CPU, R9))
    _config(code, R8)
    code.emit(ldx(8, R2, R8, h.CFG_FIBERS), jmp(Jmp.JGE, R9, R2, "hook.nofiber"),
              ldx(8, R2, R8, h.CFG_ENABLED), jmp(Jmp.JEQ, R2, 0, "hook.disabled"))
    # R7 = the fiber record, R6 = the fiber's hook block
    code.emit(mov(R1, R9), alu(Alu.MUL, R1, abi.FIBER_SIZE), *_add_const(R1, R2, abi.FIBERS),
              stx(8, R10, S_FIBER, R1), addr_space_cast(R7, R1, 0, 1))
    code.emit(mov(R1, R9), alu(Alu.MUL, R1, h.FB_SIZE), *_add_const(R1, R2, h.HOOK_FIBERS),
              addr_space_cast(R6, R1, 0, 1))
    code.emit(*_count(R6, h.FB_PACKETS))
    _capture(code, kind)
    _info(code, kind)
    _frame(code, opt, handler)
    _dispatch(code, layout)
    _outcomes(code, kind)
    _events(code)
    _finish(code, kind)
    return code


def _add_const(dst: Reg, tmp: Reg, value: int) -> list[Insn]:
    """``w(dst) += value`` for a window address (above 2^31, so not an ALU immediate)."""
    return [mov(tmp, value, w32=True), alu(Alu.ADD, dst, tmp, w32=True)]


def _config(code: Code, reg: Reg) -> None:
    """``reg`` = the hook block's configuration (an arena pointer)."""
    code.emit(*_config_insns(reg))


def _config_insns(reg: Reg) -> list[Insn]:
    return [mov(reg, h.HOOK, w32=True), addr_space_cast(reg, reg, 0, 1)]


def _count(block: Reg, off: int, scratch: Reg = R1) -> list[Insn]:
    return [ldx(8, scratch, block, off), alu(Alu.ADD, scratch, 1), stx(8, block, off, scratch)]


def _packet(code: Code, kind: str, data: Reg, end: Reg) -> None:
    """``data``, ``end`` = the packet's linear bytes (from the context saved on the stack)."""
    code.emit(ldx(8, R1, R10, S_CTX))
    if kind == "xdp":
        code.emit(ldx(4, data, R1, XDP_DATA), ldx(4, end, R1, XDP_DATA_END))
    else:
        code.emit(ldx(4, data, R1, abi.SKB_DATA), ldx(4, end, R1, abi.SKB_DATA_END))


def _capture(code: Code, kind: str) -> None:
    """Copy min(length, snap length, PKT_MAX) bytes of the packet into the fiber's buffer (S_CAPTURED, S_LEN)."""
    if kind == "xdp":  # the length of all its buffers, of which the first is the linear part
        code.emit(ldx(8, R1, R10, S_CTX), call_helper(Helper.XDP_GET_BUFF_LEN), stx(8, R10, S_LEN, R0))
        _packet(code, kind, R2, R3)
        code.emit(mov(R4, R3), alu(Alu.SUB, R4, R2))
    else:
        # the skb's length counts its paged part too; pull what the snap length asks into the linear part
        code.emit(ldx(8, R1, R10, S_CTX), ldx(4, R4, R1, SKB_LEN), stx(8, R10, S_LEN, R4))
        _clamp(code, R4)
        _packet(code, kind, R2, R3)
        code.emit(mov(R5, R3), alu(Alu.SUB, R5, R2), jmp(Jmp.JGE, R5, R4, "hook.linear"),
                  ldx(8, R1, R10, S_CTX), mov(R2, R4), call_helper(Helper.SKB_PULL_DATA))
        code.label("hook.linear")
        _packet(code, kind, R2, R3)
        code.emit(mov(R4, R3), alu(Alu.SUB, R4, R2))
    _clamp(code, R4)
    code.emit(stx(8, R10, S_CAPTURED, R4), ldx(8, R5, R6, h.FB_PKT), addr_space_cast(R5, R5, 0, 1))
    _copy(code, "cap", to_packet=False)


def _clamp(code: Code, n: Reg) -> None:
    """``n`` = min(n, snap length, PKT_MAX) (clobbers R0, R1)."""
    lab = code.fresh("hook.clamp")
    _config(code, R1)
    code.emit(ldx(8, R0, R1, h.CFG_SNAPLEN), jmp(Jmp.JLE, n, R0, lab), mov(n, R0))
    code.label(lab)
    lab2 = code.fresh("hook.clamp")
    code.emit(jmp(Jmp.JLE, n, h.PKT_MAX, lab2), mov(n, h.PKT_MAX))
    code.label(lab2)


def _copy(code: Code, stem: str, *, to_packet: bool) -> None:
    """Copy R4 bytes between the packet (R2 data, R3 data_end) and the buffer (R5, an arena pointer):
    COPY_BLOCK bytes a step of a loop, then what is left (less than a block) in straight-line code, words
    and then bytes. The loop's index lives in the fiber block's scratch, so the verifier knows only its
    range (masked to PKT_MAX) and the loop's states converge instead of being walked block by block; every
    packet access is checked against data_end. Clobbers R0, R1, R8, R9."""
    scr = h.FB_SCRATCH
    code.emit(st(8, R6, scr, 0))
    loop, tail, done = f"hook.{stem}blk", f"hook.{stem}tail", f"hook.{stem}done"
    code.label(loop)
    code.emit(ldx(8, R0, R6, scr), mov(R1, R0), alu(Alu.ADD, R1, COPY_BLOCK), jmp(Jmp.JGT, R1, R4, tail),
              alu(Alu.AND, R0, h.PKT_MAX - 1), mov(R1, R2), alu(Alu.ADD, R1, R0), mov(R8, R1),
              alu(Alu.ADD, R8, COPY_BLOCK), jmp(Jmp.JGT, R8, R3, tail), alu(Alu.ADD, R0, R5))  # R0: the buffer's
    for k in range(0, COPY_BLOCK, 8):
        code.emit(*_move(8, R0, R1, k, to_packet))
    code.emit(ldx(8, R0, R6, scr), alu(Alu.ADD, R0, COPY_BLOCK), stx(8, R6, scr, R0), may_goto(tail), ja(loop))
    # the rest: R9 bytes left, R1 where they are in the packet, R0 in the buffer
    code.label(tail)
    code.emit(ldx(8, R0, R6, scr), alu(Alu.AND, R0, h.PKT_MAX - 1), mov(R9, R4), alu(Alu.SUB, R9, R0),
              mov(R1, R2), alu(Alu.ADD, R1, R0), alu(Alu.ADD, R0, R5))
    words = f"hook.{stem}bytes"
    for width, steps, out in ((8, COPY_BLOCK // 8 - 1, words), (1, 7, done)):
        for _ in range(steps):
            code.emit(jmp(Jmp.JLT, R9, width, out), mov(R8, R1), alu(Alu.ADD, R8, width), jmp(Jmp.JGT, R8, R3, done),
                      *_move(width, R0, R1, 0, to_packet), alu(Alu.ADD, R1, width), alu(Alu.ADD, R0, width),
                      alu(Alu.SUB, R9, width))
        code.label(out)


def _move(width: int, buf: Reg, pkt: Reg, off: int, to_packet: bool) -> list[Insn]:
    """One load and store of ``width`` bytes at ``off`` between the buffer and the packet (through R8)."""
    if to_packet:
        return [ldx(width, R8, buf, off), stx(width, pkt, off, R8)]
    return [ldx(width, R8, pkt, off), stx(width, buf, off, R8)]


def _info(code: Code, kind: str) -> None:
    """Fill the fiber's packet-info record."""
    code.emit(ldx(8, R5, R6, h.FB_INFO), addr_space_cast(R5, R5, 0, 1), ldx(8, R1, R10, S_CTX))
    if kind == "xdp":
        code.emit(ldx(4, R2, R1, XDP_IFINDEX), ldx(4, R3, R1, XDP_QUEUE), mov(R4, 0))
    else:
        code.emit(ldx(4, R2, R1, SKB_IFINDEX), ldx(4, R3, R1, SKB_QUEUE), ldx(4, R4, R1, SKB_PROTOCOL))
    code.emit(stx(4, R5, h.INFO_IFINDEX, R2), stx(4, R5, h.INFO_QUEUE, R3), stx(4, R5, h.INFO_PROTOCOL, R4),
              ldx(8, R1, R10, S_LEN), stx(4, R5, h.INFO_LEN, R1), ldx(8, R1, R10, S_CAPTURED),
              stx(4, R5, h.INFO_CAPTURED, R1), ldx(8, R1, R10, S_CPU), stx(4, R5, h.INFO_CPU, R1),
              st(4, R5, h.INFO_HOOK, h.HOOK_IDS[kind]), ldx(8, R1, R6, h.FB_PACKETS), stx(8, R5, h.INFO_SEQ, R1),
              st(4, R5, h.INFO_CHANGED, 0))


def _frame(code: Code, opt: Options, handler: RegionKey) -> None:
    """The handler's first frame at the bottom of the fiber's stack: (buffer, length, info) as its locals;
    the C stack pointer and the state set afresh. R9 = the state."""
    code.emit(ldx(8, R1, R10, S_CPU), alu(Alu.MUL, R1, opt.stack_size), *_add_const(R1, R2, abi.STACKS),
              stx(8, R10, S_FP, R1), addr_space_cast(R2, R1, 0, 1),
              st(8, R2, abi.FRAME_CALLER, 0), mov(R3, abi.RETURN_TO_HOST, w32=True), stx(8, R2, abi.FRAME_RETURN, R3),
              ldx(8, R3, R6, h.FB_PKT), stx(8, R2, abi.FRAME_LOCALS, R3),
              ldx(8, R3, R10, S_LEN), stx(8, R2, abi.FRAME_LOCALS + abi.SLOT, R3),
              ldx(8, R3, R6, h.FB_INFO), stx(8, R2, abi.FRAME_LOCALS + 2 * abi.SLOT, R3),
              ldx(8, R3, R6, h.FB_SP), stx(8, R7, abi.FIBER_STACK_POINTER, R3))
    ins = mov(R3, 0, w32=True)
    code.region_ref(ins, handler)
    code.emit(mov(R9, R1), alu(Alu.LSH, R9, 32), ins, alu(Alu.OR, R9, R3), stx(8, R7, abi.FIBER_STATE, R9))


def _dispatch(code: Code, layout: Layout) -> None:
    """The dispatcher loop of the may_goto profile (``dispatcher.entry_program``), with the packet's budget:
    R9 = state, R8 = budget left, R7 = fiber record, R6 = fiber block."""
    _config(code, R1)
    code.emit(ldx(8, R8, R1, h.CFG_BUDGET), stx(8, R10, S_BUDGET, R8), st(8, R7, abi.FIBER_RUN_COUNT, 0))
    code.label("hook.loop")
    code.emit(mov(R1, R9, w32=True), jmp(Jmp.JGE, R1, abi.SPECIAL_BASE, "hook.special", w32=True),
              may_goto("hook.budget"), jmp(Jmp.JEQ, R8, 0, "hook.budget"), alu(Alu.SUB, R8, 1),
              stx(8, R7, abi.FIBER_RUN_BUDGET, R8), alu(Alu.AND, R1, PHYS_MASK))
    call_tree(code, layout.local, "hook", "hook.back", None)
    code.label("hook.back")
    code.emit(ldx(8, R8, R7, abi.FIBER_RUN_BUDGET), ja("hook.loop"))


def _account(code: Code) -> None:
    """Add what the packet ran (budget at the start, less what is left, less what a may_goto left over) to
    the fiber block's and fiber record's counts."""
    code.emit(ldx(8, R3, R10, S_BUDGET), alu(Alu.SUB, R3, R8), ldx(8, R2, R7, abi.FIBER_RUN_COUNT),
              alu(Alu.SUB, R3, R2), ldx(8, R2, R6, h.FB_TRANSITIONS), alu(Alu.ADD, R2, R3),
              stx(8, R6, h.FB_TRANSITIONS, R2), ldx(8, R2, R7, abi.FIBER_TRANSITIONS), alu(Alu.ADD, R2, R3),
              stx(8, R7, abi.FIBER_TRANSITIONS, R2))


def _outcomes(code: Code, kind: str) -> None:
    """How the handler ended: its verdict, or the default with a count (and an event)."""
    code.label("hook.special")
    code.emit(mov(R2, R9, w32=True), jmp(Jmp.JEQ, R2, abi.RETURN_TO_HOST, "hook.done", w32=True),
              jmp(Jmp.JEQ, R2, abi.SPECIAL_YIELD, "hook.resume", w32=True),
              jmp(Jmp.JEQ, R2, abi.SPECIAL_GROW, "hook.resume", w32=True),
              jmp(Jmp.JEQ, R2, abi.SPECIAL_EXIT, "hook.exit", w32=True))
    # a trap: the code, where, and the frame it happened in
    code.emit(*_count(R6, h.FB_TRAPS), mov(R2, R9, w32=True), alu(Alu.SUB, R2, abi.SPECIAL_BASE, w32=True),
              mov(R1, R9), alu(Alu.RSH, R1, 32), stx(8, R7, abi.FIBER_TRAP_FP, R1), stx(8, R10, S_EV_FP, R1),
              stx(8, R10, S_EV_CODE, R2), ldx(4, R2, R7, abi.FIBER_TRAP_REGION), stx(8, R10, S_EV_REGION, R2),
              st(8, R10, S_EV_KIND, h.Record.TRAP), ja("hook.abandon"))
    # nobody serves a yield or a grow on a hook: continue at once (the grow then fails, as past its maximum)
    code.label("hook.resume")  # charged like a transition: a guest yielding for ever ends with its budget
    code.emit(ldx(8, R9, R7, abi.FIBER_RESUME), may_goto("hook.budget"), jmp(Jmp.JEQ, R8, 0, "hook.budget"),
              alu(Alu.SUB, R8, 1), ja("hook.loop"))
    code.label("hook.exit")
    code.emit(*_count(R6, h.FB_EXITS), ldx(8, R2, R7, abi.FIBER_EXIT_CODE), stx(8, R10, S_EV_CODE, R2),
              mov(R2, abi.RETURN_TO_HOST, w32=True), stx(8, R10, S_EV_REGION, R2),  # no region: no backtrace
              st(8, R10, S_EV_FP, 0), st(8, R10, S_EV_KIND, h.Record.EXIT),
              ja("hook.abandon"))
    code.label("hook.budget")
    code.emit(*_count(R6, h.FB_BUDGET), st(8, R10, S_EV_CODE, 0), mov(R2, R9, w32=True),
              stx(8, R10, S_EV_REGION, R2), mov(R1, R9), alu(Alu.RSH, R1, 32), stx(8, R10, S_EV_FP, R1),
              st(8, R10, S_EV_KIND, h.Record.BUDGET), ja("hook.abandon"))
    # the handler returned: its verdict, if this hook has it
    code.label("hook.done")
    _account(code)
    code.emit(ldx(8, R1, R10, S_FP), addr_space_cast(R1, R1, 0, 1), ldx(4, R2, R1, abi.FRAME_LOCALS))
    for verdict in h.ACTIONS[kind]:
        code.emit(jmp(Jmp.JEQ, R2, int(verdict), f"hook.v{int(verdict)}", w32=True))
    code.emit(jmp(Jmp.JEQ, R2, int(h.Verdict.DEFAULT), "hook.default", w32=True),
              *_count(R6, h.FB_BAD_VERDICT), ja("hook.default"))
    for verdict, action in h.ACTIONS[kind].items():
        code.label(f"hook.v{int(verdict)}")
        code.emit(mov(R1, int(action)), stx(8, R10, S_ACTION, R1), ja(f"hook.count{int(verdict)}"))
    # the handler said it changed the buffer: copy it back into the packet (the linear part it came from)
    code.label("hook.changed")
    code.emit(ldx(8, R5, R6, h.FB_INFO), addr_space_cast(R5, R5, 0, 1), ldx(4, R1, R5, h.INFO_CHANGED),
              jmp(Jmp.JEQ, R1, 0, "hook.finish"), *_count(R6, h.FB_WRITEBACKS))
    _packet(code, kind, R2, R3)
    code.emit(ldx(8, R4, R10, S_CAPTURED), ldx(8, R5, R6, h.FB_PKT), addr_space_cast(R5, R5, 0, 1))
    _copy(code, "back", to_packet=True)
    code.emit(ja("hook.finish"))


def _events(code: Code) -> None:
    """A packet abandoned (budget, trap, exit): break the heap lock if this fiber held it, send the event and
    its backtrace to the ring, and give the default verdict."""
    code.label("hook.abandon")
    _account(code)
    skip = "hook.lockfree"
    _config(code, R1)
    code.emit(ldx(8, R2, R1, h.CFG_LOCK), jmp(Jmp.JEQ, R2, 0, skip), addr_space_cast(R2, R2, 0, 1),
              ldx(8, R0, R10, S_CPU), alu(Alu.ADD, R0, 1), mov(R3, h.LOCK_BROKEN, w32=True), cmpxchg(4, R2, 0, R3),
              ldx(8, R1, R10, S_CPU), alu(Alu.ADD, R1, 1), jmp(Jmp.JNE, R0, R1, skip, w32=True),
              *_count(R6, h.FB_LOCK_BREAKS))
    code.label(skip)
    code.emit(ld_map_fd(R1, h.RING_MAP), mov(R2, h.EV_RECORD), mov(R3, 0), call_helper(Helper.RINGBUF_RESERVE),
              jmp(Jmp.JEQ, R0, 0, "hook.lost"))
    code.emit(ldx(8, R1, R10, S_EV_KIND), stx(4, R0, h.REC_KIND, R1), ldx(8, R1, R10, S_CPU),
              stx(4, R0, h.REC_FIBER, R1), ldx(8, R1, R6, h.FB_PACKETS), stx(8, R0, h.REC_SEQ, R1),
              ldx(8, R1, R10, S_EV_CODE), stx(4, R0, h.EV_CODE, R1), ldx(8, R1, R10, S_EV_REGION),
              stx(4, R0, h.EV_REGION, R1), st(4, R0, h.EV_INLINED, 0),
              ldx(8, R1, R10, S_EV_KIND), jmp(Jmp.JNE, R1, h.Record.TRAP, "hook.walk"),
              ldx(4, R1, R7, abi.FIBER_TRAP_INLINED), stx(4, R0, h.EV_INLINED, R1))
    # the return regions of the frames below, outwards (the host names their functions)
    code.label("hook.walk")
    code.emit(ldx(8, R2, R10, S_EV_FP))
    for k in range(h.EV_MAX_FRAMES):
        code.emit(jmp(Jmp.JEQ, R2, 0, f"hook.depth{k}"), addr_space_cast(R3, R2, 0, 1),
                  ldx(4, R4, R3, abi.FRAME_RETURN), jmp(Jmp.JEQ, R4, abi.RETURN_TO_HOST, f"hook.depth{k}", w32=True),
                  stx(4, R0, h.EV_FRAMES + 4 * k, R4), ldx(4, R2, R3, abi.FRAME_CALLER))
    for k in range(h.EV_MAX_FRAMES, -1, -1):
        code.label(f"hook.depth{k}")
        code.emit(mov(R1, k), ja("hook.submit"))
    code.label("hook.submit")
    code.emit(stx(4, R0, h.EV_DEPTH, R1), mov(R1, R0), mov(R2, 0), call_helper(Helper.RINGBUF_SUBMIT),
              ja("hook.default"))
    code.label("hook.lost")
    code.emit(*_count(R6, h.FB_RING_DROPS), ja("hook.default"))


def _finish(code: Code, kind: str) -> None:
    """The default verdict, the counts of what was returned, and the way out (the fiber idle again)."""
    acts = h.ACTIONS[kind]
    code.label("hook.default")
    code.emit(*_count(R6, h.FB_DEFAULTED))
    _config(code, R1)
    code.emit(ldx(8, R2, R1, h.CFG_DEFAULT), jmp(Jmp.JEQ, R2, int(h.Verdict.DROP), "hook.defdrop"),
              mov(R1, int(acts[h.Verdict.PASS])), stx(8, R10, S_ACTION, R1), *_count(R6, h.FB_PASS),
              ja("hook.idle"))
    code.label("hook.defdrop")
    code.emit(mov(R1, int(acts[h.Verdict.DROP])), stx(8, R10, S_ACTION, R1), *_count(R6, h.FB_DROP),
              ja("hook.idle"))
    counters = {h.Verdict.PASS: h.FB_PASS, h.Verdict.DROP: h.FB_DROP, h.Verdict.TX: h.FB_TX}
    for verdict in acts:
        code.label(f"hook.count{int(verdict)}")
        code.emit(*_count(R6, counters[verdict]), ja("hook.changed"))
    code.label("hook.finish")
    code.label("hook.idle")
    code.emit(mov(R1, abi.RETURN_TO_HOST, w32=True), stx(8, R7, abi.FIBER_STATE, R1), ldx(8, R0, R10, S_ACTION),
              exit_())
    # no fiber for this CPU, or the hook is paused: the default verdict, counted for all CPUs
    for label, counter in (("hook.nofiber", h.G_NO_FIBER), ("hook.disabled", h.G_DISABLED)):
        code.label(label)
        code.emit(*_config_insns(R1), mov(R2, 1), atomic(Atomic.ADD, 8, R1, counter, R2),
                  ldx(8, R2, R1, h.CFG_DEFAULT), mov(R0, int(acts[h.Verdict.PASS])),
                  jmp(Jmp.JNE, R2, int(h.Verdict.DROP), "hook.out"), mov(R0, int(acts[h.Verdict.DROP])), ja("hook.out"))
    code.label("hook.out")
    code.emit(exit_())


# -- capsule_emit --------------------------------------------------------------------------------------------
def emit_function() -> Code:
    """``u64 capsule_emit(u64 fd, u64 addr, u64 len, u64 fiber)``: one output record of at most OUT_MAX bytes
    of guest memory at ``addr``; returns the bytes taken, or -1 when the ring was full (counted in the
    fiber's block). Words are copied whole (up to 7 bytes past the output are read, and ignored by the
    host): the unrolled copy is straight-line code for the verifier."""
    code = Code()
    code.label(EMIT_FUNC)
    code.emit(mov(R6, R1), mov(R7, R2), mov(R8, R3), mov(R9, R4), jmp(Jmp.JLE, R8, h.OUT_MAX, "emit.len"),
              mov(R8, h.OUT_MAX))
    code.label("emit.len")
    # the fiber's block: its index from the record's address
    code.emit(mov(R1, R9, w32=True), *_add_const(R1, R2, -abi.FIBERS & 0xFFFF_FFFF), alu(Alu.RSH, R1, 8, w32=True),
              mov(R9, R1), alu(Alu.MUL, R1, h.FB_SIZE), *_add_const(R1, R2, h.HOOK_FIBERS),
              stx(8, R10, -8, R1))
    code.emit(ld_map_fd(R1, h.RING_MAP), mov(R2, h.OUT_RECORD), mov(R3, 0), call_helper(Helper.RINGBUF_RESERVE),
              jmp(Jmp.JEQ, R0, 0, "emit.lost"))
    code.emit(st(4, R0, h.REC_KIND, h.Record.OUT), stx(4, R0, h.REC_FIBER, R9), ldx(8, R1, R10, -8),
              addr_space_cast(R1, R1, 0, 1), ldx(8, R1, R1, h.FB_PACKETS), stx(8, R0, h.REC_SEQ, R1),
              stx(4, R0, h.OUT_FD, R6), stx(4, R0, h.OUT_LEN, R8), addr_space_cast(R7, R7, 0, 1))
    for k in range(0, h.OUT_MAX, 8):
        code.emit(jmp(Jmp.JLE, R8, k, "emit.copied"), ldx(8, R1, R7, k), stx(8, R0, h.OUT_DATA + k, R1))
    code.label("emit.copied")
    code.emit(mov(R1, R0), mov(R2, 0), call_helper(Helper.RINGBUF_SUBMIT), mov(R0, R8), exit_())
    code.label("emit.lost")
    code.emit(ldx(8, R1, R10, -8), addr_space_cast(R1, R1, 0, 1), *_count(R1, h.FB_RING_DROPS, R2), mov(R0, -1),
              exit_())
    return code


def emit_btf(btf: BTF) -> int:
    """The BTF function of ``capsule_emit`` (global functions need one)."""
    u64 = btf.int_id(8)
    proto = btf.add_func_proto(u64, [("fd", u64), ("addr", u64), ("len", u64), ("fiber", u64)])
    return btf.add_func(EMIT_FUNC, proto)
