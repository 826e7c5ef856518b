"""enums of include/uapi/linux/bpf.h that both an object (which program type a section means) and the
kernel layer (what to load) speak of; they live here so that capsule.bpf depends on nothing above it."""

from __future__ import annotations

from enum import IntEnum, IntFlag


class ProgType(IntEnum):
    """enum bpf_prog_type."""

    UNSPEC = 0
    SOCKET_FILTER = 1
    KPROBE = 2
    SCHED_CLS = 3
    SCHED_ACT = 4
    TRACEPOINT = 5
    XDP = 6
    PERF_EVENT = 7
    CGROUP_SKB = 8
    CGROUP_SOCK = 9
    LWT_IN = 10
    LWT_OUT = 11
    LWT_XMIT = 12
    SOCK_OPS = 13
    SK_SKB = 14
    CGROUP_DEVICE = 15
    SK_MSG = 16
    RAW_TRACEPOINT = 17
    CGROUP_SOCK_ADDR = 18
    LWT_SEG6LOCAL = 19
    LIRC_MODE2 = 20
    SK_REUSEPORT = 21
    FLOW_DISSECTOR = 22
    CGROUP_SYSCTL = 23
    RAW_TRACEPOINT_WRITABLE = 24
    CGROUP_SOCKOPT = 25
    TRACING = 26
    STRUCT_OPS = 27
    EXT = 28
    LSM = 29
    SK_LOOKUP = 30
    SYSCALL = 31
    NETFILTER = 32


class AttachType(IntEnum):
    """enum bpf_attach_type (the ones capsule uses; values are positions in the uapi enum)."""

    CGROUP_INET_INGRESS = 0
    CGROUP_INET_EGRESS = 1
    TRACE_RAW_TP = 23
    TRACE_FENTRY = 24
    TRACE_FEXIT = 25
    LSM_MAC = 27
    TRACE_ITER = 28
    XDP_DEVMAP = 33
    XDP_CPUMAP = 35
    SK_LOOKUP = 36
    XDP = 37
    PERF_EVENT = 41
    NETFILTER = 45
    TCX_INGRESS = 46
    TCX_EGRESS = 47


class ProgFlags(IntFlag):
    """BPF_PROG_LOAD prog_flags."""

    STRICT_ALIGNMENT = 1 << 0
    ANY_ALIGNMENT = 1 << 1
    TEST_RND_HI32 = 1 << 2
    TEST_STATE_FREQ = 1 << 3
    SLEEPABLE = 1 << 4
    XDP_HAS_FRAGS = 1 << 5
    XDP_DEV_BOUND_ONLY = 1 << 6
    TEST_REG_INVARIANTS = 1 << 7
