"""Numbers from include/uapi/linux/bpf.h (Linux 6.18) that only the bpf(2) syscall layer speaks: commands,
link types, update and log flags, test-run and ring buffer bits.

Numbers that objects and code generators speak of too (program, map and attach types, load and map flags,
helper ids, XDP verdicts) live in ``capsule.bpf.uapi``; they are re-exported here for the kernel layer.
The uapi enums only ever grow by appending, so these values hold on every kernel that knows the name.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

from capsule.bpf.uapi import (  # noqa: F401 (they belong to both layers)
    PERCPU_MAP_TYPES,
    AttachType,
    Helper,
    MapFlags,
    MapType,
    ProgFlags,
    ProgType,
    XDPAction,
)

BPF_OBJ_NAME_LEN = 16
BPF_TAG_SIZE = 8


class Cmd(IntEnum):
    """enum bpf_cmd: the first argument of bpf(2)."""

    MAP_CREATE = 0
    MAP_LOOKUP_ELEM = 1
    MAP_UPDATE_ELEM = 2
    MAP_DELETE_ELEM = 3
    MAP_GET_NEXT_KEY = 4
    PROG_LOAD = 5
    OBJ_PIN = 6
    OBJ_GET = 7
    PROG_ATTACH = 8
    PROG_DETACH = 9
    PROG_TEST_RUN = 10
    PROG_GET_NEXT_ID = 11
    MAP_GET_NEXT_ID = 12
    PROG_GET_FD_BY_ID = 13
    MAP_GET_FD_BY_ID = 14
    OBJ_GET_INFO_BY_FD = 15
    PROG_QUERY = 16
    RAW_TRACEPOINT_OPEN = 17
    BTF_LOAD = 18
    BTF_GET_FD_BY_ID = 19
    TASK_FD_QUERY = 20
    MAP_LOOKUP_AND_DELETE_ELEM = 21
    MAP_FREEZE = 22
    BTF_GET_NEXT_ID = 23
    MAP_LOOKUP_BATCH = 24
    MAP_LOOKUP_AND_DELETE_BATCH = 25
    MAP_UPDATE_BATCH = 26
    MAP_DELETE_BATCH = 27
    LINK_CREATE = 28
    LINK_UPDATE = 29
    LINK_GET_FD_BY_ID = 30
    LINK_GET_NEXT_ID = 31
    ENABLE_STATS = 32
    ITER_CREATE = 33
    LINK_DETACH = 34
    PROG_BIND_MAP = 35
    TOKEN_CREATE = 36


class LinkType(IntEnum):
    """enum bpf_link_type."""

    UNSPEC = 0
    RAW_TRACEPOINT = 1
    TRACING = 2
    CGROUP = 3
    ITER = 4
    NETNS = 5
    XDP = 6
    PERF_EVENT = 7
    KPROBE_MULTI = 8
    STRUCT_OPS = 9
    NETFILTER = 10
    TCX = 11
    UPROBE_MULTI = 12
    NETKIT = 13
    SOCKMAP = 14


class UpdateFlags(IntEnum):
    """The flags of BPF_MAP_UPDATE_ELEM."""

    ANY = 0
    NOEXIST = 1
    EXIST = 2
    F_LOCK = 4


class LogLevel(IntFlag):
    """Verifier log_level bits."""

    NONE = 0
    BRANCHES = 1  # the path that failed, plus the final stats line
    INSNS = 2  # every instruction with register state
    STATS = 4  # verification time, stack depth, processed insns
    FIXED = 8  # keep the head of an overlong log instead of rotating to keep its tail


class XDPFlags(IntFlag):
    """XDP_FLAGS_* of include/uapi/linux/if_link.h (LINK_CREATE flags for BPF_XDP)."""

    UPDATE_IF_NOEXIST = 1 << 0
    SKB_MODE = 1 << 1
    DRV_MODE = 1 << 2
    HW_MODE = 1 << 3
    REPLACE = 1 << 4


STATS_RUN_TIME = 0  # enum bpf_stats_type
TEST_RUN_ON_CPU = 1 << 0  # BPF_F_TEST_RUN_ON_CPU
TEST_XDP_LIVE_FRAMES = 1 << 1

RINGBUF_BUSY_BIT = 1 << 31
RINGBUF_DISCARD_BIT = 1 << 30
RINGBUF_HDR_SZ = 8
