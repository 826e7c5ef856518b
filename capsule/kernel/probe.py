"""What the running kernel's BPF can do, found by trying it (in the manner of cilium/ebpf's ``features``).

Each probe creates a tiny map or loads (and mostly runs) a tiny program that uses exactly one feature, and
answers yes or no with the reason the kernel gave (errno and the verifier's last complaint). Kernel versions
are not consulted: distributions backport features and leave them out, and only the bpf(2) answer is true.
A probe closes everything it opened before it returns; its answer is cached for the life of the process
(``probe``), so asking again costs nothing.

The names (``arena``, ``may_goto``, ``cpu_v4`` ...) are the ones ``capsule.kernel.profiles`` and
``capsule.kernel.preflight`` speak of; ``PROBES`` is their one home, in the order ``capsule probe`` prints.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from capsule.bpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    Builder,
    addr_space_cast,
    alu,
    atomic,
    call,
    call_helper,
    call_kfunc,
    exit_,
    gotol,
    jmp,
    ld_func,
    ld_map_fd,
    ld_map_value,
    ldx,
    ldxs,
    may_goto,
    mov,
    movsx,
    sdiv,
    st,
)
from capsule.bpf.btf import BTF
from capsule.bpf.btf_types import Linkage
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Atomic, Jmp
from capsule.bpf.spec import FuncInfo
from capsule.bpf.uapi import Helper, MapFlags, MapType, ProgFlags, ProgType, XDPAction

from .arena import Arena
from .btf import load_btf, vmlinux_btf_id
from .errors import BPFError, LoadError, VerifierError
from .maps import Map
from .prog import Program
from .sys import enable_stats

MiB = 1 << 20
# array value sizes tried, in order: 4 MiB (the map window's piece in the BPF Capsule article) up to 256 MiB;
# each accepted size is really allocated (vmalloc), so the ladder stops there
VALUE_LADDER = tuple((4 * MiB) << (2 * k) for k in range(4))
XDP_PACKET = bytes(64)  # BPF_PROG_TEST_RUN of XDP wants at least an Ethernet header
NUMA_NO_NODE = -1


class ProbeFailed(Exception):
    """A probe's program ran but did something else than the feature promises (the detail says what)."""


@dataclass(frozen=True)
class ProbeResult:
    """One probe's answer: ``ok``, and ``detail`` saying why not (errno: reason) or what was seen; ``value`` is
    a measured number where the probe measures one (the largest array value size)."""

    name: str
    ok: bool
    detail: str = ""
    value: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "value": self.value}


@dataclass(frozen=True)
class Probe:
    """A feature and how to find it: ``title`` names it in messages, ``since`` is the mainline release that
    brought it (for the reader; the probe never looks at versions), ``check`` returns a detail or a value."""

    name: str
    title: str
    since: str
    check: Callable[[], str | tuple[int, str]]


# -- small programs ------------------------------------------------------------------------------------------
def _load(ptype: ProgType, insns: list[Insn], **kw: object) -> Program:
    return Program.load(ptype, insns, name="capsule_probe", **kw)  # type: ignore[arg-type]


def _load_with_btf(ptype: ProgType, insns: list[Insn], funcs: Sequence[tuple[int, str, int]]) -> Program:
    """Load a program of several functions, each (slot, name, linkage) described in BTF as ``int f(u64)``:
    the verifier wants func_info as soon as there is more than one function."""
    btf = BTF()
    int_id = btf.add_int("int", 4, signed=True)
    proto = btf.add_func_proto(int_id, [("x", btf.add_int("unsigned long long", 8))])
    infos = [FuncInfo(slot, btf.add_func(name, proto, linkage)) for slot, name, linkage in funcs]
    with load_btf(btf.encode()) as btf_fd:
        return _load(ptype, insns, prog_btf_fd=btf_fd, func_info=infos)


def _with_map(ins: Insn, m: Map) -> Insn:
    """An ``ld_map_fd``/``ld_map_value`` with the map's fd filled in, as a loader would."""
    return replace(ins, imm=(ins.imm & ~0xFFFFFFFF) | m.fileno(), ref=None)


def _kfunc(name: str) -> Insn:
    """A kfunc call resolved against vmlinux BTF; LoadError when this kernel has no such function."""
    try:
        return replace(call_kfunc(name), imm=vmlinux_btf_id(name), ref=None)
    except (KeyError, OSError):
        raise LoadError(f"kfunc {name} is not in this kernel's BTF") from None


def _run(prog: Program, *, repeat: int = 1) -> int:
    """The program's return value on a minimal packet (signed 32 bits)."""
    with prog:
        return prog.test_run(XDP_PACKET, repeat=repeat).retval_signed


def _expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise ProbeFailed(f"{what} returned {got}, expected {want}")


def _asm(*insns: Insn | str) -> list[Insn]:
    """Instructions and label names (a ``str`` labels the next instruction), assembled."""
    b = Builder()
    for x in insns:
        if isinstance(x, str):
            b.label(x)
        else:
            b.emit(x)
    return b.assemble()


# -- the probes ----------------------------------------------------------------------------------------------
def _socket_filter() -> str:
    _expect(_run(_load(ProgType.SOCKET_FILTER, _asm(mov(R0, 7), exit_()))), 7, "a socket filter")
    return ""


def _xdp_test_run() -> str:
    prog = _load(ProgType.XDP, _asm(mov(R0, XDPAction.PASS), exit_()))
    with prog:
        res = prog.test_run(XDP_PACKET, repeat=1000)
    _expect(res.retval, XDPAction.PASS, "an XDP program run 1000 times")
    return f"{res.duration_ns} ns per run"


def _cpu_v2() -> str:  # JLT/JLE/JSLT/JSLE came with v2 (4.14)
    insns = _asm(mov(R0, 1), jmp(Jmp.JLT, R1, 1, "out"), mov(R0, 2), "out", exit_())
    _expect(_run(_load(ProgType.SOCKET_FILTER, insns)), 2, "a JLT program")
    return ""


def _cpu_v3() -> str:  # the JMP32 class came with v3 (5.1)
    insns = _asm(mov(R0, 1), mov(R2, -1), jmp(Jmp.JEQ, R2, -1, "out", w32=True), mov(R0, 2), "out", exit_())
    _expect(_run(_load(ProgType.SOCKET_FILTER, insns)), 1, "a JMP32 program")
    return ""


def _cpu_v4() -> str:  # signed division, movsx and sign-extending loads (6.6)
    insns = _asm(
        mov(R0, -10), sdiv(R0, 5),  # -2
        mov(R2, 0x1FE), movsx(R2, R2, 8),  # (s8)0xfe = -2
        alu(Alu.ADD, R0, R2),
        st(1, FP, -8, 0xFF), ldxs(1, R3, FP, -8),  # (s8)0xff = -1
        alu(Alu.ADD, R0, R3),
        exit_(),
    )
    _expect(_run(_load(ProgType.SOCKET_FILTER, insns)), -5, "a cpu v4 program")
    return ""


def _gotol() -> str:
    """Two gotol on the only path, one back: a kernel that reads a JMP32 JA as ``ja +off`` (imm ignored, as
    6.1 does) sees the last instruction as unreachable and refuses the program."""
    insns = _asm(mov(R0, 2), gotol("back"), "out", exit_(), "back", gotol("out"))
    _expect(_run(_load(ProgType.SOCKET_FILTER, insns)), 2, "a gotol program")
    return ""


def _may_goto() -> str:
    insns = _asm(mov(R0, 1), may_goto("out"), mov(R0, 2), "out", exit_())
    _expect(_run(_load(ProgType.SOCKET_FILTER, insns)), 2, "a may_goto program")
    return ""


def _bpf_loop() -> str:
    insns = _asm(
        mov(R1, 5), ld_func(R2, "body"), mov(R3, 0), mov(R4, 0), call_helper(Helper.LOOP), exit_(),
        "body", mov(R0, 0), exit_(),
    )
    prog = _load_with_btf(ProgType.XDP, insns, [(0, "capsule_probe", Linkage.GLOBAL), (7, "body", Linkage.STATIC)])
    _expect(_run(prog), 5, "bpf_loop of 5 iterations")
    return ""


def _global_funcs() -> str:
    """A global subprogram, verified on its own, which needs BTF func_info naming both functions."""
    insns = _asm(mov(R1, 41), call("add1"), exit_(), "add1", mov(R0, R1, w32=True), alu(Alu.ADD, R0, 1), exit_())
    funcs = [(0, "capsule_probe", Linkage.GLOBAL), (3, "probe_add1", Linkage.GLOBAL)]
    prog = _load_with_btf(ProgType.XDP, insns, funcs)
    _expect(_run(prog), 42, "a call of a global function")
    return ""


def _tail_calls() -> str:
    with Map.create(MapType.PROG_ARRAY, 4, 4, 1, name="probe_jmp") as jumps:
        with _load(ProgType.XDP, _asm(mov(R0, XDPAction.TX), exit_())) as callee:
            jumps.set_prog(0, callee)
        caller = _asm(_with_map(ld_map_fd(R2, "jmp"), jumps), mov(R3, 0), call_helper(Helper.TAIL_CALL),
                      mov(R0, XDPAction.PASS), exit_())
        _expect(_run(_load(ProgType.XDP, caller)), XDPAction.TX, "an XDP program tail-calling one returning TX")
    return ""


def _ringbuf() -> str:
    with Map.create(MapType.RINGBUF, 0, 0, mmap.PAGESIZE, name="probe_rb") as rb:
        insns = _asm(st(8, FP, -8, 7), _with_map(ld_map_fd(R1, "rb"), rb), mov(R2, FP), alu(Alu.ADD, R2, -8),
                     mov(R3, 8), mov(R4, 0), call_helper(Helper.RINGBUF_OUTPUT), exit_())
        _expect(_run(_load(ProgType.XDP, insns)), 0, "bpf_ringbuf_output")
    return ""


def _atomics() -> str:
    """Atomic read-modify-write with fetch on a map value (v3 atomics, 5.12): the map window's atomics."""
    with Map.create(MapType.ARRAY, 4, 8, 1, name="probe_atomic") as m:
        m.update(0, 40)
        insns = _asm(_with_map(ld_map_value(R1, "m"), m), mov(R2, 2), atomic(Atomic.ADD, 8, R1, 0, R2, fetch=True),
                     mov(R0, R2), exit_())
        _expect(_run(_load(ProgType.XDP, insns)), 40, "atomic_fetch_add on a map value")
        _expect(m.lookup_int(0) or 0, 42, "the map value after atomic_fetch_add")
    return ""


def _mmapable_array() -> str:
    with Map.create(MapType.ARRAY, 4, mmap.PAGESIZE, 1, name="probe_mmap", flags=MapFlags.MMAPABLE) as m:
        with mmap.mmap(m.fileno(), mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mem:
            mem[:4] = b"\x2a\0\0\0"
            insns = _asm(_with_map(ld_map_value(R1, "m"), m), ldx(4, R0, R1, 0), exit_())
            _expect(_run(_load(ProgType.XDP, insns)), 42, "a load from a value written through mmap")
    return ""


def _array_value_max() -> tuple[int, str]:
    """The largest value size of ``VALUE_LADDER`` that a one-element mmapable ARRAY can have here, and the
    kernel's answer to the next size (or that the ladder ended)."""
    best, note = 0, "the largest size tried"
    for size in VALUE_LADDER:
        try:
            with Map.create(MapType.ARRAY, 4, size, 1, name="probe_big", flags=MapFlags.MMAPABLE):
                best = size
        except BPFError as e:
            if not best:
                raise
            note = f"{size // MiB} MiB: {errno.errorcode.get(e.errno or 0, e.errno)}"
            break
    return best, note


def _arena() -> str:
    """An arena shared with this process: a value written through the mapping is read by an XDP program."""
    with Arena.create_arena(4, name="probe_arena") as arena:
        arena.write(0, struct.pack("<I", 42))
        insns = _asm(_with_map(ld_map_fd(R2, "arena"), arena), mov(R1, arena.ptr32(0), w32=True),
                     addr_space_cast(R1, R1, 0, 1), ldx(4, R0, R1, 0), exit_())
        _expect(_run(_load(ProgType.XDP, insns)), 42, "a load from the arena")
    return ""


def _arena_atomics() -> str:
    with Arena.create_arena(4, name="probe_arena") as arena:
        arena.write(0, struct.pack("<Q", 40))
        insns = _asm(_with_map(ld_map_fd(R2, "arena"), arena), mov(R1, arena.ptr32(0), w32=True),
                     addr_space_cast(R1, R1, 0, 1), mov(R2, 2), atomic(Atomic.ADD, 8, R1, 0, R2, fetch=True),
                     mov(R0, R2), exit_())
        _expect(_run(_load(ProgType.XDP, insns)), 40, "atomic_fetch_add in the arena")
        _expect(struct.unpack("<Q", arena.read(0, 8))[0], 42, "the arena word after atomic_fetch_add")
    return ""


def _sleepable() -> str:
    prog = _load(ProgType.SYSCALL, _asm(mov(R0, 3), exit_()), prog_flags=ProgFlags.SLEEPABLE)
    with prog:
        _expect(prog.test_run(ctx_in=bytes(8)).retval_signed, 3, "a sleepable SYSCALL program")
    return ""


def _arena_alloc_pages() -> str:
    """``bpf_arena_alloc_pages`` from a sleepable SYSCALL program (the only kind allowed to call it)."""
    with Arena.create_arena(4, name="probe_arena") as arena:
        insns = _asm(_with_map(ld_map_fd(R1, "arena"), arena), mov(R2, 0), mov(R3, 1), mov(R4, NUMA_NO_NODE),
                     mov(R5, 0), _kfunc("bpf_arena_alloc_pages"), mov(R6, R0), mov(R0, 0),
                     jmp(Jmp.JEQ, R6, 0, "out"), mov(R0, 1), "out", exit_())
        prog = _load(ProgType.SYSCALL, insns, prog_flags=ProgFlags.SLEEPABLE)
        with prog:
            _expect(prog.test_run(ctx_in=bytes(8)).retval, 1, "bpf_arena_alloc_pages (1 page)")
    return ""


def _kfuncs() -> str:
    """Any kernel function call: the open-coded number iterator (6.4), present for every program type."""
    insns = _asm(mov(R1, FP), alu(Alu.ADD, R1, -8), mov(R2, 0), mov(R3, 3), _kfunc("bpf_iter_num_new"),
                 mov(R1, FP), alu(Alu.ADD, R1, -8), _kfunc("bpf_iter_num_next"),
                 mov(R1, FP), alu(Alu.ADD, R1, -8), _kfunc("bpf_iter_num_destroy"), mov(R0, 0), exit_())
    _expect(_run(_load(ProgType.XDP, insns)), 0, "bpf_iter_num_new/next/destroy")
    return "bpf_iter_num_*"


def _bpf_stats() -> str:
    enable_stats().close()
    return ""


PROBES: tuple[Probe, ...] = (
    Probe("socket_filter", "socket filter programs and BPF_PROG_TEST_RUN", "4.12", _socket_filter),
    Probe("xdp_test_run", "BPF_PROG_TEST_RUN of XDP with repeat", "4.12", _xdp_test_run),
    Probe("cpu_v2", "cpu v2 instructions (JLT, JLE, JSLT, JSLE)", "4.14", _cpu_v2),
    Probe("cpu_v3", "cpu v3 instructions (JMP32)", "5.1", _cpu_v3),
    Probe("cpu_v4", "cpu v4 instructions (sdiv, movsx, sign-extending loads)", "6.6", _cpu_v4),
    Probe("gotol", "gotol (cpu v4 long jump)", "6.6", _gotol),
    Probe("may_goto", "may_goto", "6.9", _may_goto),
    Probe("bpf_loop", "the bpf_loop helper", "5.17", _bpf_loop),
    Probe("global_funcs", "global functions with BTF", "5.6", _global_funcs),
    Probe("tail_calls", "tail calls (PROG_ARRAY) from XDP", "4.2", _tail_calls),
    Probe("ringbuf", "BPF_MAP_TYPE_RINGBUF", "5.8", _ringbuf),
    Probe("atomics", "atomic fetch-and-add on map values", "5.12", _atomics),
    Probe("mmapable_array", "mmapable ARRAY maps", "5.5", _mmapable_array),
    Probe("array_value_max", "largest value of a mmapable ARRAY", "5.5", _array_value_max),
    Probe("arena", "BPF_MAP_TYPE_ARENA", "6.9", _arena),
    Probe("arena_atomics", "atomics on arena memory", "6.12", _arena_atomics),
    Probe("sleepable", "sleepable programs (SYSCALL)", "5.14", _sleepable),
    Probe("arena_alloc_pages", "the bpf_arena_alloc_pages kfunc", "6.9", _arena_alloc_pages),
    Probe("kfuncs", "kfunc calls (bpf_iter_num_*)", "6.4", _kfuncs),
    Probe("bpf_stats", "BPF_ENABLE_STATS (run_time_ns, run_cnt)", "5.8", _bpf_stats),
)
BY_NAME = {p.name: p for p in PROBES}


def _reason(e: BaseException) -> str:
    """The kernel's answer in one line: errno name and the verifier's complaint or what was attempted."""
    if isinstance(e, VerifierError):
        code = errno.errorcode.get(e.errno or 0, str(e.errno))
        return f"{code}: {e.reason or 'refused by the verifier'}"
    if isinstance(e, BPFError):
        code = errno.errorcode.get(e.errno or 0, str(e.errno))
        return f"{code}: {e.message.split(' (', 1)[0] or e.strerror}"
    if isinstance(e, OSError):
        return f"{errno.errorcode.get(e.errno or 0, str(e.errno))}: {e.strerror}"
    return str(e)


@functools.cache
def probe(name: str) -> ProbeResult:
    """Run the probe called ``name`` once per process; ``KeyError`` for a name no probe has."""
    p = BY_NAME[name]
    try:
        out = p.check()
    except (BPFError, LoadError, ProbeFailed, OSError, ctypes.ArgumentError) as e:
        return ProbeResult(name, False, _reason(e))
    if isinstance(out, tuple):
        value, note = out
        return ProbeResult(name, True, f"{value // MiB} MiB ({note})", value)
    return ProbeResult(name, True, out or "")


def probe_all() -> dict[str, ProbeResult]:
    """Every probe's answer, in ``PROBES`` order."""
    return {p.name: probe(p.name) for p in PROBES}
