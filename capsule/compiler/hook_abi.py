"""The contract between a hook entry program (``hooks``) and the host that attaches it (``capsule.hooks``):
names, the hook block's layout in the window, verdicts, the packet-info record the guest reads, and the
records of the ring buffer. Like ``abi``, every number here is used by both sides; the guest's C header
``capsule/guest/include/capsule_hook.h`` mirrors the verdicts and the info record.

The hook block sits in the runtime area, above the fiber records and below the stacks::

    HOOK           configuration (host -> kernel, read by every packet) and counters for all CPUs
    HOOK_FIBERS    one block per fiber: where its packet buffer, info record and C stack are (host), and
                   what its packets did (kernel, counted without atomics: a fiber belongs to one CPU)

A packet on CPU ``c`` runs on fiber ``c`` (``c < CFG_FIBERS``); the host keeps the last fiber for its own
calls (set-up, reading state) while the hook is attached.
"""

from __future__ import annotations

from enum import IntEnum

from capsule.bpf.uapi import TcAction, XDPAction

from . import abi

HOOK_KINDS = ("xdp", "tc")  # the hooks a compiled object may be attached to
HOOK_PROGRAM = "capsule_hook"  # the entry program attached to the hook
RING_MAP = "capsule_ring"  # the BPF ring buffer carrying output and events to the host
RING_SIZE = 1 << 20  # its default size in bytes (the host may change it before loading)
HOOK_SECTION = ".capsule.hook"  # JSON: the hook kind and what the host must prepare (``hooks.describe``)
HANDLER_EXPORT = "capsule_packet"  # the guest's handler: (packet, length, info) -> Verdict
START_EXPORT = "capsule_hook_start"  # the guest runtime's set-up (constructors, heap), called once by the host
INIT_EXPORT = "capsule_init"  # the program's own optional set-up, called once by the host after the start
LOCK_EXPORT = "capsule_heap_lock"  # returns the guest heap's lock word's address
HEAP_EXPORT = "capsule_heap"  # returns the address of the guest heap's state (capsule/guest/hook/heap.h)
PKT_MAX = 16384  # bytes a packet buffer holds: the largest snap length


class Verdict(IntEnum):
    """What a handler returns. DEFAULT, like a budget exhaustion, a trap or an exit, gives the packet the
    configured default verdict (PASS unless the user says otherwise); so does any other value, counted as a
    bad verdict."""

    DEFAULT = 0
    PASS = 1
    DROP = 2
    TX = 3  # XDP only: send the packet back out of the interface it came in on


# the kernel's action for each verdict, per hook
ACTIONS: dict[str, dict[Verdict, int]] = {
    "xdp": {Verdict.PASS: XDPAction.PASS, Verdict.DROP: XDPAction.DROP, Verdict.TX: XDPAction.TX},
    "tc": {Verdict.PASS: TcAction.OK, Verdict.DROP: TcAction.SHOT},
}
HOOK_IDS = {"xdp": 1, "tc": 2}  # ``info->hook``

HOOK = abi.RT_BASE + 0x300_0000
# configuration, written by the host before attaching (and at any time after: every packet reads it)
CFG_ENABLED = 0  # u64: 0 gives every packet the default verdict without running the guest
CFG_FIBERS = 8  # u64: CPUs below this run packets, each on the fiber of its own number
CFG_BUDGET = 16  # u64: region transitions and loop iterations one packet may use
CFG_DEFAULT = 24  # u64: the Verdict given on budget exhaustion, trap, exit, or a verdict the hook lacks
CFG_SNAPLEN = 32  # u64: packet bytes copied into the window (at most PKT_MAX)
CFG_LOCK = 40  # u64: guest address of the heap lock word (0: none), broken when its owner is abandoned
# counted by the kernel for all CPUs (atomic adds)
G_NO_FIBER = 64  # u64: packets that came on a CPU without a fiber (given the default verdict)
G_DISABLED = 72  # u64: packets that came while CFG_ENABLED was 0

HOOK_FIBERS = HOOK + 0x1000
FB_SIZE = 256  # bytes per fiber block
FB_PKT = 0  # u64 (host): guest address of the fiber's packet buffer, PKT_MAX bytes in linear memory
FB_INFO = 8  # u64 (host): guest address of its packet-info record
FB_SP = 16  # u64 (host): the C stack pointer every packet starts with
FB_PACKETS = 24  # u64 counters (kernel) from here
FB_PASS = 32
FB_DROP = 40
FB_TX = 48
FB_DEFAULTED = 56  # given the default verdict: the four below, and the handler's own Verdict.DEFAULT
FB_BUDGET = 64  # the handler used up its budget
FB_TRAPS = 72
FB_EXITS = 80
FB_BAD_VERDICT = 88  # it returned something that is not a verdict of this hook
FB_TRANSITIONS = 96  # regions run and loop iterations, all packets
FB_RING_DROPS = 104  # ring-buffer records lost because the ring was full
FB_WRITEBACKS = 112  # packets the handler changed, copied back
FB_LOCK_BREAKS = 120  # packets abandoned while holding the heap lock (the heap is then refused to all)
FB_SCRATCH = 192  # u64 x 8: the entry program's own (a copy loop's index kept where the verifier cannot see)
COUNTERS = ("packets", "pass", "drop", "tx", "defaulted", "budget", "traps", "exits", "bad_verdict",
            "transitions", "ring_drops", "writebacks", "lock_breaks")  # FB_PACKETS onwards, 8 bytes each

LOCK_BROKEN = 0xFFFF_FFFF  # the heap lock's value once a fiber holding it was abandoned

# struct capsule_packet_info (guest memory, one per fiber; capsule_hook.h)
INFO_LEN = 0  # u32: the packet's length
INFO_CAPTURED = 4  # u32: bytes copied into the buffer (the length, the snap length, or the linear part)
INFO_IFINDEX = 8  # u32: the interface it came in on
INFO_QUEUE = 12  # u32: its receive queue
INFO_CPU = 16  # u32: the CPU (and fiber) running the handler
INFO_HOOK = 20  # u32: HOOK_IDS
INFO_SEQ = 24  # u64: packets this fiber has seen, this one included
INFO_CHANGED = 32  # u32 (guest): set it to write the buffer back into the packet
INFO_PROTOCOL = 36  # u32: tc: the skb's protocol (network byte order); XDP: 0
INFO_SIZE = 40

# ring-buffer records: a header, then by kind
REC_KIND = 0  # u32
REC_FIBER = 4  # u32
REC_SEQ = 8  # u64: the fiber's packet count when it was written (0 for output of host calls before any)
REC_HEADER = 16


class Record(IntEnum):
    OUT = 1  # output: u32 fd, u32 length, bytes
    TRAP = 2  # events: u32 code, u32 inlined, u32 region, u32 frames, u32 return regions[EV_FRAMES]
    BUDGET = 3
    EXIT = 4


OUT_FD = 16
OUT_LEN = 20
OUT_DATA = 24
OUT_RECORD = 256  # every output record has this size (the ring's reservations must be constants)
OUT_MAX = OUT_RECORD - OUT_DATA  # bytes of output one record carries
EV_CODE = 16  # trap code, or exit code
EV_INLINED = 20  # 1 + the function whose inlined body trapped, else 0
EV_REGION = 24  # the region that trapped, or where the fiber stood when its budget ran out
EV_DEPTH = 28  # return regions recorded below
EV_FRAMES = 32
EV_MAX_FRAMES = 16
EV_RECORD = EV_FRAMES + 4 * EV_MAX_FRAMES


def fiber_block(fiber: int) -> int:
    return HOOK_FIBERS + fiber * FB_SIZE
