"""The contract between compiled code and the host: where things live in the window, and what numbers mean.

The window is one 4 GiB BPF arena. A guest address is a window offset, identical for the kernel (after
``addr_space_cast``) and for the host (the arena is mapped at a 4 GiB-aligned user address). The wasm linear
memory starts at 0; the runtime area sits at the top, out of the way of ``memory.grow``::

    0                      RT_BASE                                                       4 GiB
    | linear memory ...    | control | globals | func info | tables | fibers | stacks ... |

A *state* is what the dispatcher carries between regions: ``frame pointer << 32 | region id``. A region id's
low PHYS_BITS bits name the physical BPF function that holds the region, the rest the region inside it; ids from
``SPECIAL_BASE`` up are not regions but outcomes (return to host, traps).

A software-stack frame of a wasm function, at guest address ``fp`` (stacks grow upwards)::

    fp + 0    caller's frame pointer (u64)
    fp + 8    region to continue at when this function returns (u64)
    fp + 16   local 0 (parameters first), 8 bytes each; results are written over them on return
    ...       operand-stack slots (8 bytes each), where values live across region boundaries

The caller builds the callee's frame right after its own (``fp + frame_size(caller)``).
"""

from __future__ import annotations

from enum import IntEnum

# the names the host looks up in a compiled object
ENTRY_PROGRAM = "capsule_run"  # the program the host runs with BPF_PROG_TEST_RUN (a tc program: below)
PROGRAMS_MAP = "capsule_programs"  # the program array joining the programs of a split object (tail calls)
MAX_PROGRAMS = 64


def program_name(k: int) -> str:
    """Program ``k`` of a compiled object: the first keeps the entry's old name."""
    return ENTRY_PROGRAM if k == 0 else f"{ENTRY_PROGRAM}_{k}"
WINDOW_MAP = "capsule_window"  # the arena map that is the window
# the map tier's window (``window``): one-element mmapable ARRAYs, the object's .bss sections, mapped by the
# host at these window addresses (MAP_PIECES)
MEMORY_PIECE = ".bss.capsule_mem"  # linear memory, from 0
RUNTIME_PIECE = ".bss.capsule_rt"  # control block, globals, function info and tables, from RT_BASE
FIBER_PIECE = ".bss.capsule_fiber"  # the fiber records, from FIBERS
STACK_PIECE = ".bss.capsule_stack"  # the fibers' stacks, from STACKS
META_SECTION = ".capsule.meta"  # what the host needs to instantiate and call the module (``meta``)
DATA_SECTION = ".capsule.data"  # the data segments' bytes, placed by the host

GIB4 = 1 << 32
PAGE = 4096
WASM_PAGE = 65536

RT_BASE = 0xF000_0000  # linear memory may grow to 3.75 GiB
MAX_MEMORY_PAGES = RT_BASE // WASM_PAGE
# In fast mode (no bounds checks) every address is masked to the smallest power of two that holds the memory's
# maximum, at most FAST_MAX_BYTES: an access, even a wild one, then stays below RT_BASE (offsets in an
# instruction add at most 32 KiB), so a buggy guest may corrupt its own memory but never the runtime's.
FAST_MAX_BYTES = 1 << 31


def fast_mask(max_bytes: int) -> int:
    """The address mask of fast mode for a memory of at most ``max_bytes`` (which it may lower)."""
    size = WASM_PAGE
    while size < min(max_bytes, FAST_MAX_BYTES):
        size <<= 1
    return size - 1


# control block (module-wide)
CTRL = RT_BASE
CTRL_MEM_PAGES = 0  # current memory size, wasm pages
CTRL_MEM_BYTES = 8  # current memory size, bytes
CTRL_MEM_MAX_PAGES = 16
CTRL_COMMITTED = 24  # bytes of linear memory backed by arena pages
CTRL_TABLE0_SIZE = 40  # u64 per table, MAX_TABLES of them
CTRL_REALTIME_OFFSET = 128  # realtime clock minus boot-time clock, ns (written by the host)

GLOBALS = RT_BASE + 0x1000  # 8 bytes per wasm global
MAX_GLOBALS = (0x10_0000 - 0x1000) // 8
FUNC_INFO = RT_BASE + 0x10_0000  # 8 bytes per function: entry region id | type id << 32
MAX_FUNCS = 0x10_0000 // 8
TABLES = RT_BASE + 0x20_0000  # table t at TABLES + t * TABLE_STRIDE: 8 bytes per element (function index + 1)
TABLE_STRIDE = 0x40_0000
MAX_TABLES = 8
MAX_TABLE_ELEMS = TABLE_STRIDE // 8
FIBERS = RT_BASE + 0x220_0000
FIBER_SIZE = 256
MAX_FIBERS = 64
STACKS = RT_BASE + 0x400_0000  # fiber f's software stack at STACKS + f * stack_size
MAP_PIECES = {MEMORY_PIECE: 0, RUNTIME_PIECE: RT_BASE, FIBER_PIECE: FIBERS, STACK_PIECE: STACKS}

# fiber state record
FIBER_STATE = 0  # u64: frame pointer << 32 | next region
FIBER_GENERATION = 8  # u64: bumped by reset, part of the continuation token
FIBER_STATUS = 16  # u64: Status of the last invocation
FIBER_TRAP_REGION = 24  # u64: region that trapped
FIBER_TRAP_FP = 32  # u64: frame pointer at the trap
FIBER_TRANSITIONS = 40  # u64: regions run, all invocations
FIBER_STACK_POINTER = 48  # u64: the fiber's own copy of the C shadow-stack pointer global
FIBER_INVOCATIONS = 56
FIBER_RUN_COUNT = 64  # u64: regions run in the current invocation (profile without may_goto)
FIBER_RUN_BUDGET = 72  # u64: the current invocation's budget (profile without may_goto)
FIBER_TRAP_INLINED = 80  # u64: 1 + the function whose inlined body trapped inside the trapping one, else 0
FIBER_RESUME = 88  # u64: the state a yielded fiber continues at
FIBER_EXIT_CODE = 96  # u64: the code given to capsule.exit
FIBER_GROW = 104  # u64: bytes of linear memory a memory.grow needs backed by pages (status GROW)
FIBER_SWITCHES = 112  # u64: tail calls from one program of a split object to another, all invocations
FIBER_STACK_LOW = 120  # u64: the lowest value the C stack pointer may take (the stack's bottom)
FIBER_STACK_HIGH = 128  # u64: and the highest (its top): outside, the C stack has overflowed

# the dispatcher's bounded loops in the profile without may_goto: regions per step, steps per round, rounds
STEP_REGIONS = 32
ROUND_STEPS = 2048
RUN_ROUNDS = 64

# the BPF stack of a physical function (and of a leaf function): scratch that never holds guest values
BPF_FP_SCALAR = -8  # the frame pointer as a guest address (u64 scalar)
BPF_RUNTIME = -16  # PTR_TO_ARENA at RT_BASE
BPF_FIBER = -24  # PTR_TO_ARENA at the running fiber's state record
BPF_MEM_BYTES = -32  # current memory size in bytes
BPF_CALL_REGION = -40  # call_indirect: the callee's entry region while its frame is written
BPF_BORROW = -48  # a stack register lent as a scratch register (``emit.borrow``)
BPF_TEMP = -56  # a short-lived value inside one instruction's lowering
BPF_TEMP2 = -64  # a second one; also a helper's result while the registers around the call are reloaded
BPF_TEMP3 = -72  # a third (an atomic compare-and-swap loop's bit position, ``atomics``)
BPF_FIBER_SCALAR = -80  # the fiber record's guest address (u64 scalar), for calls to leaf functions

# the BPF stack of the entry program and of the bounded dispatcher loops (profile without may_goto)
BPF_ENTRY_FIBER = -8  # the fiber record's guest address, passed to every physical function
BPF_ENTRY_BUDGET = -16  # the invocation's budget as it came in (entry program only)
BPF_ENTRY_CTX = -24  # the __sk_buff context, for a tail call to another program of a split object
BPF_ENTRY_TARGET = -32  # the program a tail call goes to

# frame header
FRAME_CALLER = 0
FRAME_RETURN = 8
FRAME_LOCALS = 16
SLOT = 8

# region ids
PHYS_BITS = 10
MAX_PHYS = (1 << PHYS_BITS) - 1  # physical functions in all programs together (each program holds at most 255)
SPECIAL_BASE = 0xFFFF_FF00  # + a Trap code (below 0x80), or one of these:
SPECIAL_YIELD = SPECIAL_BASE + 0x80
SPECIAL_EXIT = SPECIAL_BASE + 0x81
SPECIAL_GROW = SPECIAL_BASE + 0x82
RETURN_TO_HOST = 0xFFFF_FFFF


class Trap(IntEnum):
    """Trap codes: a region that traps returns ``SPECIAL_BASE + code`` as its next region."""

    UNREACHABLE = 1
    INT_DIV_ZERO = 2
    INT_OVERFLOW = 3
    BAD_CONVERSION = 4
    OUT_OF_BOUNDS = 5
    INDIRECT_NULL = 6
    INDIRECT_TYPE = 7
    TABLE_OUT_OF_BOUNDS = 8
    STACK_OVERFLOW = 9
    UNDEFINED_ELEMENT = 10
    UNCAUGHT_LONGJMP = 11
    UNALIGNED_ATOMIC = 12
    ATOMIC_CONTENDED = 13  # a compare-and-swap loop was cut by may_goto (another CPU kept changing the word)
    EXPECTED_SHARED = 14  # memory.atomic.wait on a memory that is not shared

    @property
    def message(self) -> str:
        return _TRAP_TEXT[self]


_TRAP_TEXT = {
    Trap.UNREACHABLE: "unreachable",
    Trap.INT_DIV_ZERO: "integer divide by zero",
    Trap.INT_OVERFLOW: "integer overflow",
    Trap.BAD_CONVERSION: "invalid conversion to integer",
    Trap.OUT_OF_BOUNDS: "out of bounds memory access",
    Trap.INDIRECT_NULL: "uninitialized element",
    Trap.INDIRECT_TYPE: "indirect call type mismatch",
    Trap.TABLE_OUT_OF_BOUNDS: "out of bounds table access",
    Trap.STACK_OVERFLOW: "call stack exhausted",
    Trap.UNDEFINED_ELEMENT: "undefined element",
    Trap.UNCAUGHT_LONGJMP: "longjmp with no setjmp to return to",
    Trap.UNALIGNED_ATOMIC: "unaligned atomic",
    Trap.ATOMIC_CONTENDED: "atomic operation starved by other CPUs",
    Trap.EXPECTED_SHARED: "expected shared memory",
}


class Status(IntEnum):
    """What one invocation of the entry program reports (its return value and ``ctx.status``)."""

    DONE = 0  # the called function returned; results are in the first frame
    PENDING = 1  # budget used up: continue with the same token
    TRAP = 2  # see FIBER_TRAP_* and the trap code in ctx.detail
    BAD_TOKEN = 3  # fiber index out of range or generation mismatch: nothing ran
    YIELD = 4  # the guest called capsule.yield: serve it and continue with the same token
    EXIT = 5  # the guest called capsule.exit; ctx.detail is the code and the fiber is idle again
    GROW = 6  # a memory.grow needs pages up to ctx.detail bytes: back them, then continue with the same token


# The entry program is a tc (SCHED_CLS) program run by BPF_PROG_TEST_RUN on a "packet" that is the context
# below. Not sleepable, because programs too large for one verifier budget are split into several joined by
# tail calls, which no sleepable program may use (a PROG_ARRAY is refused); the price is that a non-sleepable
# program cannot allocate arena pages, so a memory.grow past the committed pages returns to the host (status
# GROW). tc rather than XDP because a test run of XDP with a repeat count flips a kernel static key (~17 ms a
# call, measured), where tc's repeats cost ~40 ns each.


# the entry program's context: the packet's bytes (BPF_PROG_TEST_RUN data_in/data_out)
# The host runs the entry with a ``repeat`` count: the packet persists from one run to the next, so the runs
# continue one fiber (each with a fresh chain of 33 tail calls) until one ends in something other than PENDING,
# after which the remaining runs return at once. The status is PENDING going in.
CTX_FIBER = 0  # u32
CTX_GENERATION = 4  # u32
CTX_BUDGET = 8  # u64: region transitions allowed in each run
CTX_STATUS = 16  # u64 (in: PENDING; out)
CTX_DETAIL = 24  # u64 (out): trap code
CTX_TRANSITIONS = 32  # u64 (out): regions run, all runs
CTX_LEFT = 40  # u64: the budget left, handed from one program of a split object to the next in a tail call
CTX_CHAINED = 48  # u64: 1 while CTX_LEFT holds that (the run continues), 0 at the start of a run
CTX_SIZE = 56
SKB_DATA = 76  # struct __sk_buff: the packet's start and end (u32 each, the verifier makes them pointers)
SKB_DATA_END = 80


def state(fp: int, region: int) -> int:
    return (fp << 32) | region
