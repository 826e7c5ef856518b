"""What one instruction reads and writes: registers, memory, control flow.

Every analysis asks the same questions of an instruction, so the answers live here once. Registers are bit
masks (bit ``n`` is ``rn``). Helper calls read ``r1``-``r5`` (as many as the helper takes, when known) and
clobber ``r0``-``r5``; BPF-to-BPF and kfunc calls do the same; legacy ``ld_abs``/``ld_ind`` read ``r6`` (the
skb) and clobber ``r0``-``r5`` as the verifier says they do.
"""

from __future__ import annotations

from typing import NamedTuple

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import ADDR_SPACE_CAST, SIZE_BYTES, Alu, Atomic, CallKind, Class, Jmp, Mode, Src

__all__ = ["Effect", "effect", "effects", "reg_mask", "CALLER_SAVED", "ARGS", "HELPER_ARGS", "mem_size",
           "is_pure_alu", "JUMPS", "COND_JUMPS", "EXIT", "CALL", "LD_IMM64", "regs_of"]


def reg_mask(*regs: int) -> int:
    m = 0
    for r in regs:
        m |= 1 << r
    return m


ARGS = reg_mask(1, 2, 3, 4, 5)
CALLER_SAVED = reg_mask(0, 1, 2, 3, 4, 5)

# number of arguments of common helpers (include/uapi/linux/bpf.h); unknown helpers read all five
HELPER_ARGS: dict[int, int] = {
    1: 2,  # map_lookup_elem
    2: 4,  # map_update_elem
    3: 2,  # map_delete_elem
    4: 3,  # probe_read
    5: 0,  # ktime_get_ns
    6: 5,  # trace_printk (variadic up to 5)
    7: 0,  # get_prandom_u32
    8: 0,  # get_smp_processor_id
    12: 3,  # tail_call
    14: 0,  # get_current_pid_tgid
    15: 0,  # get_current_uid_gid
    16: 2,  # get_current_comm
    23: 3,  # redirect
    25: 5,  # perf_event_output
    35: 0,  # get_current_task
    44: 2,  # xdp_adjust_head
    51: 3,  # redirect_map
    54: 2,  # xdp_adjust_meta
    65: 2,  # xdp_adjust_tail
    113: 3,  # probe_read_kernel
    130: 4,  # ringbuf_output
    131: 3,  # ringbuf_reserve
    132: 2,  # ringbuf_submit
    133: 2,  # ringbuf_discard
    181: 4,  # loop
    195: 3,  # map_lookup_percpu_elem
    9: 5,  # skb_store_bytes
    10: 5,  # l3_csum_replace
    11: 5,  # l4_csum_replace
    26: 4,  # skb_load_bytes
    27: 3,  # get_stackid
    28: 5,  # csum_diff
    34: 1,  # get_hash_recalc
    42: 0,  # get_numa_node_id
    45: 3,  # probe_read_str
    46: 1,  # get_socket_cookie
    55: 4,  # perf_event_read_value
    67: 4,  # get_stack
    69: 4,  # fib_lookup
    87: 3,  # map_push_elem
    88: 2,  # map_pop_elem
    89: 2,  # map_peek_elem
    109: 1,  # send_signal
    112: 3,  # probe_read_user
    114: 3,  # probe_read_user_str
    115: 3,  # probe_read_kernel_str
    118: 0,  # jiffies64
    120: 4,  # get_ns_current_pid_tgid
    125: 0,  # ktime_get_boot_ns
    134: 2,  # ringbuf_query
    158: 0,  # get_current_task_btf
    160: 0,  # ktime_get_coarse_ns
    165: 5,  # snprintf
    173: 1,  # get_func_ip
    183: 3,  # get_func_arg
    184: 2,  # get_func_ret
    185: 1,  # get_func_arg_cnt
    189: 4,  # xdp_load_bytes
    190: 4,  # xdp_store_bytes
}


class Effect(NamedTuple):
    uses: int  # registers read
    defs: int  # registers written (or clobbered)
    load: bool = False  # reads memory
    store: bool = False  # writes memory
    call: bool = False  # helper, kfunc or BPF-to-BPF call


# opcode tables, so that hot loops test an ``int`` against a set instead of calling ``Insn`` properties
JUMPS = frozenset(c | op | s for c in (Class.JMP, Class.JMP32) for op in Jmp if op not in (Jmp.CALL, Jmp.EXIT)
                  for s in (0, Src.X))  # PC-relative jumps, conditional or not
COND_JUMPS = frozenset(c for c in JUMPS if c & 0xF0 not in (Jmp.JA, Jmp.JCOND))
EXIT = int(Class.JMP | Jmp.EXIT)
CALL = int(Class.JMP | Jmp.CALL)
LD_IMM64 = 0x18

_CACHE: dict[tuple[int, int, int, int], Effect] = {}


def effects(insns: list[Insn]) -> list[Effect]:
    """``effect`` of every instruction, memoised by encoding (programs repeat the same few hundred)."""
    get = _CACHE.get
    out = [get((ins.code, ins.dst, ins.src, ins.imm)) for ins in insns]
    if None in out:  # encodings not seen yet
        for i, e in enumerate(out):
            if e is None:
                ins = insns[i]
                out[i] = _CACHE[(ins.code, ins.dst, ins.src, ins.imm)] = effect(ins)
    if len(_CACHE) > 200_000:
        _CACHE.clear()
    return out


def regs_of(mask: int) -> tuple[int, ...]:
    """The register numbers set in ``mask``."""
    return _REGS_OF[mask] if mask < len(_REGS_OF) else tuple(r for r in range(16) if mask >> r & 1)


_REGS_OF = [tuple(r for r in range(11) if m >> r & 1) for m in range(1 << 11)]


_MEM_SIZE = {int(k): v for k, v in SIZE_BYTES.items()}  # by plain int: no enum construction per call


def mem_size(ins: Insn) -> int:
    return _MEM_SIZE[ins.code & 0x18]


def is_pure_alu(ins: Insn) -> bool:
    """ALU/ALU64 or a plain ld_imm64: no memory, no control flow, one register written."""
    return ins.cls in (Class.ALU, Class.ALU64) or ins.is_ld_imm64


def effect(ins: Insn) -> Effect:
    cls = ins.cls
    if cls in (Class.ALU, Class.ALU64):
        op = ins.code & 0xF0
        d = 1 << ins.dst
        if op == Alu.MOV:
            if ins.code & Src.X:
                return Effect(1 << ins.src, d)
            return Effect(0, d)
        if op in (Alu.NEG, Alu.END):
            return Effect(d, d)
        if ins.code & Src.X:
            return Effect(d | 1 << ins.src, d)
        return Effect(d, d)
    if ins.is_ld_imm64:
        return Effect(0, 1 << ins.dst)
    if cls == Class.LD:  # ld_abs / ld_ind
        mode = ins.code & 0xE0
        uses = reg_mask(6) | (1 << ins.src if mode == Mode.IND else 0)
        return Effect(uses, CALLER_SAVED, load=True, call=True)
    if cls == Class.LDX:
        return Effect(1 << ins.src, 1 << ins.dst, load=True)
    if cls == Class.ST:
        return Effect(1 << ins.dst, 0, store=True)
    if cls == Class.STX:
        mode = ins.code & 0xE0
        if mode == Mode.ATOMIC:
            uses = 1 << ins.dst | 1 << ins.src
            defs = 0
            if ins.imm == Atomic.CMPXCHG:
                uses |= 1
                defs = 1
            elif ins.imm & Atomic.FETCH:
                defs = 1 << ins.src
            return Effect(uses, defs, load=True, store=True)
        return Effect(1 << ins.dst | 1 << ins.src, 0, store=True)
    # JMP / JMP32
    op = ins.code & 0xF0
    if ins.is_call:
        if ins.src == CallKind.HELPER:
            n = HELPER_ARGS.get(ins.imm, 5)
            uses = reg_mask(*range(1, n + 1))
        else:
            uses = ARGS
        return Effect(uses, CALLER_SAVED, load=True, store=True, call=True)
    if ins.is_exit:
        return Effect(1, 0)
    if op in (Jmp.JA, Jmp.JCOND):
        return Effect(0, 0)
    uses = 1 << ins.dst
    if ins.code & Src.X:
        uses |= 1 << ins.src
    return Effect(uses, 0)


def is_addr_space_cast(ins: Insn) -> bool:
    return ins.code == (Class.ALU64 | Alu.MOV | Src.X) and ins.off == ADDR_SPACE_CAST
