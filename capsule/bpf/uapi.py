"""The numbers of include/uapi/linux/bpf.h (Linux 6.18) that more than the bpf(2) syscall layer speaks of: an
object (which program type a section means, which map type a definition names), the code generators (helper ids,
load flags) and the kernel layer (what to load). They live here, below everything, so that ``capsule.bpf`` depends
on nothing above it and no other module writes a kernel number itself. Numbers only the syscall layer uses
(commands, attr layouts) are in ``capsule.kernel.consts``.

The uapi enums only ever grow by appending, so these values hold on every kernel that knows the name.

``ProgType`` and ``MapType`` are *open*: an object built for a newer kernel may name a type this table does not
know yet, and it must still load (the kernel may know it). ``ProgType(40)`` therefore gives a pseudo member
``UNKNOWN_40`` that keeps the number, instead of raising; ``.known`` tells the two apart. Converting at the
reader instead (keeping plain ints for unknown values) would make every consumer handle two types.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag


class _OpenEnum(IntEnum):
    """An IntEnum that accepts any non-negative number, making a pseudo member for one it does not list."""

    @classmethod
    def _missing_(cls, value: object) -> _OpenEnum | None:
        if not isinstance(value, int) or value < 0:
            return None
        member = int.__new__(cls, value)
        member._name_ = f"UNKNOWN_{value}"
        member._value_ = value
        # remembered, so that equal numbers give the same member (as listed ones do)
        remembered = cls._value2member_map_.setdefault(value, member)
        assert isinstance(remembered, cls)
        return remembered

    @property
    def known(self) -> bool:
        """Whether this is a value of the table rather than a pseudo member made for an unknown number."""
        return self._name_ in type(self).__members__

    @property
    def label(self) -> str:
        """The member's name, or the number itself for a pseudo member (what messages print)."""
        return self._name_ if self.known else str(self._value_)


class ProgType(_OpenEnum):
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
    """enum bpf_attach_type (values are positions in the uapi enum, up to Linux 6.13)."""

    CGROUP_INET_INGRESS = 0
    CGROUP_INET_EGRESS = 1
    CGROUP_INET_SOCK_CREATE = 2
    CGROUP_SOCK_OPS = 3
    SK_SKB_STREAM_PARSER = 4
    SK_SKB_STREAM_VERDICT = 5
    CGROUP_DEVICE = 6
    SK_MSG_VERDICT = 7
    CGROUP_INET4_BIND = 8
    CGROUP_INET6_BIND = 9
    CGROUP_INET4_CONNECT = 10
    CGROUP_INET6_CONNECT = 11
    CGROUP_INET4_POST_BIND = 12
    CGROUP_INET6_POST_BIND = 13
    CGROUP_UDP4_SENDMSG = 14
    CGROUP_UDP6_SENDMSG = 15
    LIRC_MODE2 = 16
    FLOW_DISSECTOR = 17
    CGROUP_SYSCTL = 18
    CGROUP_UDP4_RECVMSG = 19
    CGROUP_UDP6_RECVMSG = 20
    CGROUP_GETSOCKOPT = 21
    CGROUP_SETSOCKOPT = 22
    TRACE_RAW_TP = 23
    TRACE_FENTRY = 24
    TRACE_FEXIT = 25
    MODIFY_RETURN = 26
    LSM_MAC = 27
    TRACE_ITER = 28
    CGROUP_INET4_GETPEERNAME = 29
    CGROUP_INET6_GETPEERNAME = 30
    CGROUP_INET4_GETSOCKNAME = 31
    CGROUP_INET6_GETSOCKNAME = 32
    XDP_DEVMAP = 33
    CGROUP_INET_SOCK_RELEASE = 34
    XDP_CPUMAP = 35
    SK_LOOKUP = 36
    XDP = 37
    SK_SKB_VERDICT = 38
    SK_REUSEPORT_SELECT = 39
    SK_REUSEPORT_SELECT_OR_MIGRATE = 40
    PERF_EVENT = 41
    TRACE_KPROBE_MULTI = 42
    LSM_CGROUP = 43
    STRUCT_OPS = 44
    NETFILTER = 45
    TCX_INGRESS = 46
    TCX_EGRESS = 47
    TRACE_UPROBE_MULTI = 48
    CGROUP_UNIX_CONNECT = 49
    CGROUP_UNIX_SENDMSG = 50
    CGROUP_UNIX_RECVMSG = 51
    CGROUP_UNIX_GETPEERNAME = 52
    CGROUP_UNIX_GETSOCKNAME = 53
    NETKIT_PRIMARY = 54
    NETKIT_PEER = 55
    TRACE_KPROBE_SESSION = 56
    TRACE_UPROBE_SESSION = 57


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


class MapType(_OpenEnum):
    """enum bpf_map_type."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    STACK_TRACE = 7
    CGROUP_ARRAY = 8
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    SOCKMAP = 15
    CPUMAP = 16
    XSKMAP = 17
    SOCKHASH = 18
    CGROUP_STORAGE = 19
    REUSEPORT_SOCKARRAY = 20
    PERCPU_CGROUP_STORAGE = 21
    QUEUE = 22
    STACK = 23
    SK_STORAGE = 24
    DEVMAP_HASH = 25
    STRUCT_OPS = 26
    RINGBUF = 27
    INODE_STORAGE = 28
    TASK_STORAGE = 29
    BLOOM_FILTER = 30
    USER_RINGBUF = 31
    CGRP_STORAGE = 32
    ARENA = 33


PERCPU_MAP_TYPES = frozenset({MapType.PERCPU_HASH, MapType.PERCPU_ARRAY, MapType.LRU_PERCPU_HASH,
                              MapType.PERCPU_CGROUP_STORAGE})
MAP_IN_MAP_TYPES = frozenset({MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS})


class MapFlags(IntFlag):
    """BPF_MAP_CREATE map_flags."""

    NO_PREALLOC = 1 << 0
    NO_COMMON_LRU = 1 << 1
    NUMA_NODE = 1 << 2
    RDONLY = 1 << 3
    WRONLY = 1 << 4
    STACK_BUILD_ID = 1 << 5
    ZERO_SEED = 1 << 6
    RDONLY_PROG = 1 << 7
    WRONLY_PROG = 1 << 8
    CLONE = 1 << 9
    MMAPABLE = 1 << 10
    PRESERVE_ELEMS = 1 << 11
    INNER_MAP = 1 << 12
    LINK = 1 << 13
    PATH_FD = 1 << 14
    VTYPE_BTF_OBJ_FD = 1 << 15
    TOKEN_FD = 1 << 16
    SEGV_ON_FAULT = 1 << 17
    NO_USER_CONV = 1 << 18


class XDPAction(IntEnum):
    """enum xdp_action: an XDP program's verdict."""

    ABORTED = 0
    DROP = 1
    PASS = 2
    TX = 3
    REDIRECT = 4


class Helper(IntEnum):
    """enum bpf_func_id: every helper function id. The table is complete and final: the kernel adds no
    helpers since 6.2 (new kernel functions are kfuncs, named by BTF instead)."""

    UNSPEC = 0
    MAP_LOOKUP_ELEM = 1
    MAP_UPDATE_ELEM = 2
    MAP_DELETE_ELEM = 3
    PROBE_READ = 4
    KTIME_GET_NS = 5
    TRACE_PRINTK = 6
    GET_PRANDOM_U32 = 7
    GET_SMP_PROCESSOR_ID = 8
    SKB_STORE_BYTES = 9
    L3_CSUM_REPLACE = 10
    L4_CSUM_REPLACE = 11
    TAIL_CALL = 12
    CLONE_REDIRECT = 13
    GET_CURRENT_PID_TGID = 14
    GET_CURRENT_UID_GID = 15
    GET_CURRENT_COMM = 16
    GET_CGROUP_CLASSID = 17
    SKB_VLAN_PUSH = 18
    SKB_VLAN_POP = 19
    SKB_GET_TUNNEL_KEY = 20
    SKB_SET_TUNNEL_KEY = 21
    PERF_EVENT_READ = 22
    REDIRECT = 23
    GET_ROUTE_REALM = 24
    PERF_EVENT_OUTPUT = 25
    SKB_LOAD_BYTES = 26
    GET_STACKID = 27
    CSUM_DIFF = 28
    SKB_GET_TUNNEL_OPT = 29
    SKB_SET_TUNNEL_OPT = 30
    SKB_CHANGE_PROTO = 31
    SKB_CHANGE_TYPE = 32
    SKB_UNDER_CGROUP = 33
    GET_HASH_RECALC = 34
    GET_CURRENT_TASK = 35
    PROBE_WRITE_USER = 36
    CURRENT_TASK_UNDER_CGROUP = 37
    SKB_CHANGE_TAIL = 38
    SKB_PULL_DATA = 39
    CSUM_UPDATE = 40
    SET_HASH_INVALID = 41
    GET_NUMA_NODE_ID = 42
    SKB_CHANGE_HEAD = 43
    XDP_ADJUST_HEAD = 44
    PROBE_READ_STR = 45
    GET_SOCKET_COOKIE = 46
    GET_SOCKET_UID = 47
    SET_HASH = 48
    SETSOCKOPT = 49
    SKB_ADJUST_ROOM = 50
    REDIRECT_MAP = 51
    SK_REDIRECT_MAP = 52
    SOCK_MAP_UPDATE = 53
    XDP_ADJUST_META = 54
    PERF_EVENT_READ_VALUE = 55
    PERF_PROG_READ_VALUE = 56
    GETSOCKOPT = 57
    OVERRIDE_RETURN = 58
    SOCK_OPS_CB_FLAGS_SET = 59
    MSG_REDIRECT_MAP = 60
    MSG_APPLY_BYTES = 61
    MSG_CORK_BYTES = 62
    MSG_PULL_DATA = 63
    BIND = 64
    XDP_ADJUST_TAIL = 65
    SKB_GET_XFRM_STATE = 66
    GET_STACK = 67
    SKB_LOAD_BYTES_RELATIVE = 68
    FIB_LOOKUP = 69
    SOCK_HASH_UPDATE = 70
    MSG_REDIRECT_HASH = 71
    SK_REDIRECT_HASH = 72
    LWT_PUSH_ENCAP = 73
    LWT_SEG6_STORE_BYTES = 74
    LWT_SEG6_ADJUST_SRH = 75
    LWT_SEG6_ACTION = 76
    RC_REPEAT = 77
    RC_KEYDOWN = 78
    SKB_CGROUP_ID = 79
    GET_CURRENT_CGROUP_ID = 80
    GET_LOCAL_STORAGE = 81
    SK_SELECT_REUSEPORT = 82
    SKB_ANCESTOR_CGROUP_ID = 83
    SK_LOOKUP_TCP = 84
    SK_LOOKUP_UDP = 85
    SK_RELEASE = 86
    MAP_PUSH_ELEM = 87
    MAP_POP_ELEM = 88
    MAP_PEEK_ELEM = 89
    MSG_PUSH_DATA = 90
    MSG_POP_DATA = 91
    RC_POINTER_REL = 92
    SPIN_LOCK = 93
    SPIN_UNLOCK = 94
    SK_FULLSOCK = 95
    TCP_SOCK = 96
    SKB_ECN_SET_CE = 97
    GET_LISTENER_SOCK = 98
    SKC_LOOKUP_TCP = 99
    TCP_CHECK_SYNCOOKIE = 100
    SYSCTL_GET_NAME = 101
    SYSCTL_GET_CURRENT_VALUE = 102
    SYSCTL_GET_NEW_VALUE = 103
    SYSCTL_SET_NEW_VALUE = 104
    STRTOL = 105
    STRTOUL = 106
    SK_STORAGE_GET = 107
    SK_STORAGE_DELETE = 108
    SEND_SIGNAL = 109
    TCP_GEN_SYNCOOKIE = 110
    SKB_OUTPUT = 111
    PROBE_READ_USER = 112
    PROBE_READ_KERNEL = 113
    PROBE_READ_USER_STR = 114
    PROBE_READ_KERNEL_STR = 115
    TCP_SEND_ACK = 116
    SEND_SIGNAL_THREAD = 117
    JIFFIES64 = 118
    READ_BRANCH_RECORDS = 119
    GET_NS_CURRENT_PID_TGID = 120
    XDP_OUTPUT = 121
    GET_NETNS_COOKIE = 122
    GET_CURRENT_ANCESTOR_CGROUP_ID = 123
    SK_ASSIGN = 124
    KTIME_GET_BOOT_NS = 125
    SEQ_PRINTF = 126
    SEQ_WRITE = 127
    SK_CGROUP_ID = 128
    SK_ANCESTOR_CGROUP_ID = 129
    RINGBUF_OUTPUT = 130
    RINGBUF_RESERVE = 131
    RINGBUF_SUBMIT = 132
    RINGBUF_DISCARD = 133
    RINGBUF_QUERY = 134
    CSUM_LEVEL = 135
    SKC_TO_TCP6_SOCK = 136
    SKC_TO_TCP_SOCK = 137
    SKC_TO_TCP_TIMEWAIT_SOCK = 138
    SKC_TO_TCP_REQUEST_SOCK = 139
    SKC_TO_UDP6_SOCK = 140
    GET_TASK_STACK = 141
    LOAD_HDR_OPT = 142
    STORE_HDR_OPT = 143
    RESERVE_HDR_OPT = 144
    INODE_STORAGE_GET = 145
    INODE_STORAGE_DELETE = 146
    D_PATH = 147
    COPY_FROM_USER = 148
    SNPRINTF_BTF = 149
    SEQ_PRINTF_BTF = 150
    SKB_CGROUP_CLASSID = 151
    REDIRECT_NEIGH = 152
    PER_CPU_PTR = 153
    THIS_CPU_PTR = 154
    REDIRECT_PEER = 155
    TASK_STORAGE_GET = 156
    TASK_STORAGE_DELETE = 157
    GET_CURRENT_TASK_BTF = 158
    BPRM_OPTS_SET = 159
    KTIME_GET_COARSE_NS = 160
    IMA_INODE_HASH = 161
    SOCK_FROM_FILE = 162
    CHECK_MTU = 163
    FOR_EACH_MAP_ELEM = 164
    SNPRINTF = 165
    SYS_BPF = 166
    BTF_FIND_BY_NAME_KIND = 167
    SYS_CLOSE = 168
    TIMER_INIT = 169
    TIMER_SET_CALLBACK = 170
    TIMER_START = 171
    TIMER_CANCEL = 172
    GET_FUNC_IP = 173
    GET_ATTACH_COOKIE = 174
    TASK_PT_REGS = 175
    GET_BRANCH_SNAPSHOT = 176
    TRACE_VPRINTK = 177
    SKC_TO_UNIX_SOCK = 178
    KALLSYMS_LOOKUP_NAME = 179
    FIND_VMA = 180
    LOOP = 181
    STRNCMP = 182
    GET_FUNC_ARG = 183
    GET_FUNC_RET = 184
    GET_FUNC_ARG_CNT = 185
    GET_RETVAL = 186
    SET_RETVAL = 187
    XDP_GET_BUFF_LEN = 188
    XDP_LOAD_BYTES = 189
    XDP_STORE_BYTES = 190
    COPY_FROM_USER_TASK = 191
    SKB_SET_TSTAMP = 192
    IMA_FILE_HASH = 193
    KPTR_XCHG = 194
    MAP_LOOKUP_PERCPU_ELEM = 195
    SKC_TO_MPTCP_SOCK = 196
    DYNPTR_FROM_MEM = 197
    RINGBUF_RESERVE_DYNPTR = 198
    RINGBUF_SUBMIT_DYNPTR = 199
    RINGBUF_DISCARD_DYNPTR = 200
    DYNPTR_READ = 201
    DYNPTR_WRITE = 202
    DYNPTR_DATA = 203
    TCP_RAW_GEN_SYNCOOKIE_IPV4 = 204
    TCP_RAW_GEN_SYNCOOKIE_IPV6 = 205
    TCP_RAW_CHECK_SYNCOOKIE_IPV4 = 206
    TCP_RAW_CHECK_SYNCOOKIE_IPV6 = 207
    KTIME_GET_TAI_NS = 208
    USER_RINGBUF_DRAIN = 209
    CGRP_STORAGE_GET = 210
    CGRP_STORAGE_DELETE = 211
