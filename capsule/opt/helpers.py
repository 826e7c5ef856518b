"""What the optimizer knows of BPF helpers: how many arguments each reads, and what each writes through its
pointer arguments. Analyses treat a helper absent from these tables as reading all five argument registers
and as not to be trusted with a stack pointer."""

from __future__ import annotations

from capsule.bpf.uapi import Helper as H

__all__ = ["HELPER_ARGS", "HELPER_WRITES", "RETURNS_MAP_VALUE"]

# number of arguments of common helpers; unknown helpers read all five
HELPER_ARGS: dict[int, int] = {
    H.MAP_LOOKUP_ELEM: 2,
    H.MAP_UPDATE_ELEM: 4,
    H.MAP_DELETE_ELEM: 2,
    H.PROBE_READ: 3,
    H.KTIME_GET_NS: 0,
    H.TRACE_PRINTK: 5,  # variadic up to 5
    H.GET_PRANDOM_U32: 0,
    H.GET_SMP_PROCESSOR_ID: 0,
    H.TAIL_CALL: 3,
    H.GET_CURRENT_PID_TGID: 0,
    H.GET_CURRENT_UID_GID: 0,
    H.GET_CURRENT_COMM: 2,
    H.REDIRECT: 3,
    H.PERF_EVENT_OUTPUT: 5,
    H.GET_CURRENT_TASK: 0,
    H.XDP_ADJUST_HEAD: 2,
    H.REDIRECT_MAP: 3,
    H.XDP_ADJUST_META: 2,
    H.XDP_ADJUST_TAIL: 2,
    H.PROBE_READ_KERNEL: 3,
    H.RINGBUF_OUTPUT: 4,
    H.RINGBUF_RESERVE: 3,
    H.RINGBUF_SUBMIT: 2,
    H.RINGBUF_DISCARD: 2,
    H.LOOP: 4,
    H.MAP_LOOKUP_PERCPU_ELEM: 3,
    H.SKB_STORE_BYTES: 5,
    H.L3_CSUM_REPLACE: 5,
    H.L4_CSUM_REPLACE: 5,
    H.SKB_LOAD_BYTES: 4,
    H.GET_STACKID: 3,
    H.CSUM_DIFF: 5,
    H.GET_HASH_RECALC: 1,
    H.GET_NUMA_NODE_ID: 0,
    H.PROBE_READ_STR: 3,
    H.GET_SOCKET_COOKIE: 1,
    H.PERF_EVENT_READ_VALUE: 4,
    H.GET_STACK: 4,
    H.FIB_LOOKUP: 4,
    H.MAP_PUSH_ELEM: 3,
    H.MAP_POP_ELEM: 2,
    H.MAP_PEEK_ELEM: 2,
    H.SEND_SIGNAL: 1,
    H.PROBE_READ_USER: 3,
    H.PROBE_READ_USER_STR: 3,
    H.PROBE_READ_KERNEL_STR: 3,
    H.JIFFIES64: 0,
    H.GET_NS_CURRENT_PID_TGID: 4,
    H.KTIME_GET_BOOT_NS: 0,
    H.RINGBUF_QUERY: 2,
    H.GET_CURRENT_TASK_BTF: 0,
    H.KTIME_GET_COARSE_NS: 0,
    H.SNPRINTF: 5,
    H.GET_FUNC_IP: 1,
    H.GET_FUNC_ARG: 3,
    H.GET_FUNC_RET: 2,
    H.GET_FUNC_ARG_CNT: 1,
    H.XDP_LOAD_BYTES: 4,
    H.XDP_STORE_BYTES: 4,
}


# what known helpers write through their arguments: (pointer argument, size argument or a fixed size as a
# negative number, None when unknown); helpers absent from the table are not trusted with stack pointers
_NOTHING: tuple[tuple[int, int | None], ...] = ()
HELPER_WRITES: dict[int, tuple[tuple[int, int | None], ...]] = {
    **dict.fromkeys((
        H.MAP_LOOKUP_ELEM, H.MAP_UPDATE_ELEM, H.MAP_DELETE_ELEM, H.KTIME_GET_NS, H.TRACE_PRINTK, H.GET_PRANDOM_U32,
        H.GET_SMP_PROCESSOR_ID, H.SKB_STORE_BYTES, H.L3_CSUM_REPLACE, H.L4_CSUM_REPLACE, H.TAIL_CALL,
        H.GET_CURRENT_PID_TGID, H.GET_CURRENT_UID_GID, H.REDIRECT, H.PERF_EVENT_OUTPUT, H.GET_STACKID, H.CSUM_DIFF,
        H.GET_HASH_RECALC, H.GET_CURRENT_TASK, H.GET_NUMA_NODE_ID, H.XDP_ADJUST_HEAD, H.GET_SOCKET_COOKIE,
        H.REDIRECT_MAP, H.XDP_ADJUST_META, H.XDP_ADJUST_TAIL, H.MAP_PUSH_ELEM, H.SEND_SIGNAL, H.JIFFIES64,
        H.KTIME_GET_BOOT_NS, H.RINGBUF_OUTPUT, H.RINGBUF_RESERVE, H.RINGBUF_SUBMIT, H.RINGBUF_DISCARD,
        H.RINGBUF_QUERY, H.GET_CURRENT_TASK_BTF, H.KTIME_GET_COARSE_NS, H.GET_FUNC_IP, H.GET_FUNC_ARG_CNT,
        H.XDP_STORE_BYTES, H.MAP_LOOKUP_PERCPU_ELEM,
    ), _NOTHING),
    H.PROBE_READ: ((1, 2),),
    H.GET_CURRENT_COMM: ((1, 2),),
    H.PROBE_READ_STR: ((1, 2),),
    H.PROBE_READ_USER: ((1, 2),),
    H.PROBE_READ_KERNEL: ((1, 2),),
    H.PROBE_READ_USER_STR: ((1, 2),),
    H.PROBE_READ_KERNEL_STR: ((1, 2),),
    H.SNPRINTF: ((1, 2),),
    H.PERF_EVENT_READ_VALUE: ((3, 4),),
    H.GET_NS_CURRENT_PID_TGID: ((3, 4),),
    H.SKB_LOAD_BYTES: ((3, 4),),
    H.XDP_LOAD_BYTES: ((3, 4),),
    H.GET_STACK: ((2, 3),),
    H.FIB_LOOKUP: ((2, 3),),
    H.MAP_POP_ELEM: ((2, None),),
    H.MAP_PEEK_ELEM: ((2, None),),
    H.GET_FUNC_ARG: ((3, -8),),
    H.GET_FUNC_RET: ((2, -8),),
}

# helpers that return a pointer to a value of their map argument (r1), or NULL
RETURNS_MAP_VALUE = frozenset((H.MAP_LOOKUP_ELEM, H.MAP_LOOKUP_PERCPU_ELEM))
