"""The host side of a compiled module: load it, lay out the window, and call its functions.

An ``Instance`` owns the loaded program and its arena (the 4 GiB window, mapped into this process at a 4 GiB
aligned address so guest addresses are plain offsets here too). It places data segments, globals, tables and
fiber records before the first call, then drives calls: write the arguments into a fiber's first frame, run
``capsule_run`` with BPF_PROG_TEST_RUN, and read the results back, continuing while the kernel says PENDING.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from capsule.bpf.elf import read_object
from capsule.bpf.spec import ObjectSpec
from capsule.compiler import abi
from capsule.compiler.meta import ConstExpr, Meta, MetaError, MetaVersionError, from_json
from capsule.ints import MASK32, MASK64, signed
from capsule.kernel.arena import Arena
from capsule.kernel.collection import Collection
from capsule.kernel.consts import LogLevel
from capsule.kernel.errors import VerifierError
from capsule.kernel.map_window import MapWindow
from capsule.wasm import ExternKind, Op, ValType

from .errors import CallError, GuestExit, GuestRejected, GuestTrap, Pending
from .trust import check_object

C_STACK_PAGES = 4  # wasm pages of C shadow stack for every fiber after the first
GROW_AHEAD = 1 << 20  # bytes the host backs beyond what a memory.grow needs (fewer GROW round trips)
DEFAULT_BUDGET = 1 << 62  # a call's budget when its caller sets none: it runs until it ends
MAX_REPEAT = 256  # runs per BPF_PROG_TEST_RUN of an open-ended call that keeps ending PENDING
_NARROW = (ValType.I32, ValType.F32)  # held in the low 32 bits of a u64
BACKTRACE_DEPTH = 64  # frames listed in a trap's backtrace (walking a 16 MiB stack frame by frame takes seconds)


@dataclass
class RunStats:
    invocations: int = 0
    transitions: int = 0
    run_time_ns: int = 0
    wall_ns: int = 0


class Instance:
    """A compiled module loaded into the kernel, ready to call. Close it (or use ``with``) to release it."""

    def __init__(self, program: ObjectSpec | str | Path, *, imports: dict[tuple[str, str], int] | None = None,
                 log_level: int = 0) -> None:
        spec = program if isinstance(program, ObjectSpec) else read_object(Path(program))
        if abi.META_SECTION not in spec.extra_sections:
            raise CallError("not a capsule-compiled object (no .capsule.meta section); build it with capsule build")
        self.data = spec.extra_sections.get(abi.DATA_SECTION, b"")
        try:
            self.meta: Meta = from_json(spec.extra_sections[abi.META_SECTION], data_size=len(self.data))
        except MetaVersionError as e:
            raise CallError(str(e)) from None
        except MetaError as e:
            raise CallError(f"corrupted {abi.META_SECTION}: {e}") from None
        self.fibers = self.meta.options.fibers
        self.stack_size = self.meta.options.stack_size
        self.imports = imports or {}
        self.stats = RunStats()
        # called with (instance, fiber) when the guest yields to the host (capsule.yield), before resuming
        self.on_yield: Callable[[Instance, int], None] | None = None
        t0 = time.perf_counter()
        names = [abi.program_name(k) for k in range(max(1, len(self.meta.parts)))]
        missing = [n for n in names if n not in spec.programs]
        if missing:
            raise CallError(f"the object has no program {missing[0]!r}, which its {abi.META_SECTION} names")
        check_object(spec, names)  # before the kernel or the window sees anything of it
        try:
            self.coll = Collection.load(spec, programs=names, log_level=log_level)
        except VerifierError as e:
            k = names.index(e.program) if e.program in names else 0
            raise GuestRejected(self._guest_at(e.insn_index, k), e) from e
        self.load_seconds = time.perf_counter() - t0
        self._committed_stacks: set[int] = set()
        self._repeat = 1
        # False while programs that cannot be told about new pages run concurrently (an attached hook): a
        # memory.grow past the committed pages then fails instead of being served
        self.can_grow = True
        try:
            # the programs of a split object hand states to one another through the program array
            self.programs = [self.coll.programs[n] for n in names]
            self.prog = self.programs[0]
            if len(self.programs) > 1:
                table = self.coll.maps[abi.PROGRAMS_MAP]
                for k, prog in enumerate(self.programs):
                    table.set_prog(k, prog)
            self.arena = self._window()
            self.mem = self.arena.memory
            self._instantiate()
        except BaseException:
            self.close()
            raise

    def _window(self) -> Arena | MapWindow:
        """The window the object uses: its arena, or (map tier) its pieces mapped at their window offsets."""
        window = self.coll.maps.get(abi.WINDOW_MAP)
        if isinstance(window, Arena):
            return window
        pieces = [(self.coll.maps[name], off) for name, off in abi.MAP_PIECES.items() if name in self.coll.maps]
        if len(pieces) != len(abi.MAP_PIECES):
            raise CallError(f"the object has neither the arena map {abi.WINDOW_MAP!r} nor the map window's pieces "
                            f"({', '.join(abi.MAP_PIECES)})")
        return MapWindow(pieces, abi.GIB4)

    def _guest_at(self, slot: int | None, program: int = 0) -> str | None:
        """The guest function whose code holds BPF instruction ``slot`` of program ``program`` (None for the
        dispatcher's own code)."""
        if slot is None:
            return None
        name = None
        ranges = self.meta.parts[program].code_ranges if self.meta.parts else self.meta.code_ranges
        for start, func in ranges:
            if start > slot:
                break
            name = self.meta.funcs[func].name
        return name

    # -- lifetime -------------------------------------------------------------------------------------------
    def close(self) -> None:
        # drop the window's view so the arena can unmap; nothing reads a closed instance's memory
        self.mem = None  # type: ignore[assignment]
        if isinstance(getattr(self, "arena", None), MapWindow):
            self.arena.close()
        self.coll.close()

    def __enter__(self) -> Instance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw window access ----------------------------------------------------------------------------------
    def u64(self, addr: int) -> int:
        value: int = struct.unpack_from("<Q", self.mem, addr)[0]
        return value

    def set_u64(self, addr: int, v: int) -> None:
        struct.pack_into("<Q", self.mem, addr, v & MASK64)

    def commit(self, start: int, end: int) -> None:
        """Back [start, end) with arena pages (a BPF access to a missing page reads 0 and loses stores)."""
        self.arena.populate(start, end)

    @property
    def memory_size(self) -> int:
        return self.u64(abi.CTRL + abi.CTRL_MEM_BYTES)

    def memory(self) -> memoryview:
        """The guest's linear memory, as large as it is now."""
        return self.mem[: self.memory_size]

    # -- instantiation --------------------------------------------------------------------------------------
    def _instantiate(self) -> None:
        meta = self.meta
        self.commit(abi.RT_BASE, abi.RT_BASE + abi.PAGE)
        pages = meta.memory.initial if meta.memory else 0
        max_pages = meta.memory.max if meta.memory else 0
        # the C stacks of fibers other than 0 are grown on their first use (``_c_stack``), so that a module
        # called on fiber 0 only sees memory.size exactly as wasm defines it
        total = min(pages, abi.MAX_MEMORY_PAGES)
        self.commit(0, total * abi.WASM_PAGE)
        ctrl = abi.CTRL
        self.set_u64(ctrl + abi.CTRL_MEM_PAGES, total)
        self.set_u64(ctrl + abi.CTRL_MEM_BYTES, total * abi.WASM_PAGE)
        self.set_u64(ctrl + abi.CTRL_MEM_MAX_PAGES, max(max_pages, total))
        self.set_u64(ctrl + abi.CTRL_COMMITTED, total * abi.WASM_PAGE)
        self.set_u64(ctrl + abi.CTRL_REALTIME_OFFSET, time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME))
        # globals
        gvals: list[int] = []
        for glob in meta.globals:
            if glob.imported is not None:
                if glob.imported not in self.imports:
                    module, name = glob.imported
                    raise CallError(f"the module imports global {module}.{name}: give its value in imports")
                v = self.imports[glob.imported]
            else:
                v = self._eval(glob.init or (), gvals)
            gvals.append(v)
        self.commit(abi.GLOBALS, abi.GLOBALS + 8 * max(1, len(gvals)))
        for g, v in enumerate(gvals):
            self.set_u64(abi.GLOBALS + 8 * g, v)
        # function table info: entry region | type << 32
        funcs = meta.funcs
        self.commit(abi.FUNC_INFO, abi.FUNC_INFO + 8 * max(1, len(funcs)))
        for i, f in enumerate(funcs):
            entry = f.entry if f.entry is not None else abi.SPECIAL_BASE + abi.Trap.UNREACHABLE
            self.set_u64(abi.FUNC_INFO + 8 * i, entry | f.type << 32)
        for t, table in enumerate(meta.tables):
            base = abi.TABLES + t * abi.TABLE_STRIDE
            self.commit(base, base + 8 * max(1, table.initial))
            self.set_u64(ctrl + abi.CTRL_TABLE0_SIZE + 8 * t, table.initial)
        for el in meta.elems:
            if el.offset is None:  # passive
                continue
            off = self._eval(el.offset, gvals)
            size = self.u64(ctrl + abi.CTRL_TABLE0_SIZE + 8 * el.table)
            if off + len(el.items) > size:
                raise GuestTrap("out of bounds table access", [])
            for k, item in enumerate(el.items):
                v = item if isinstance(item, int) else self._eval(item, gvals)
                self.set_u64(abi.TABLES + el.table * abi.TABLE_STRIDE + 8 * (off + k), v)
        for seg in meta.data:
            if seg.offset is None:  # passive
                continue
            off = self._eval(seg.offset, gvals) & MASK32
            if off + seg.size > pages * abi.WASM_PAGE:
                raise GuestTrap("out of bounds memory access", [])
            self.mem[off : off + seg.size] = self.data[seg.at : seg.at + seg.size]
        # fibers
        self.commit(abi.FIBERS, abi.FIBERS + abi.FIBER_SIZE * self.fibers)
        sp = meta.stack_pointer_global
        for fiber in range(self.fibers):
            rec = abi.FIBERS + fiber * abi.FIBER_SIZE
            self.set_u64(rec + abi.FIBER_GENERATION, 1)
            self.set_u64(rec + abi.FIBER_STATE, abi.RETURN_TO_HOST)
            self.set_u64(rec + abi.FIBER_STACK_HIGH, MASK32)
            if sp is not None and fiber == 0:
                self.set_u64(rec + abi.FIBER_STACK_POINTER, gvals[sp])
                low, high = self._stack_bounds(gvals[sp] & MASK32, gvals)
                self.set_u64(rec + abi.FIBER_STACK_LOW, low)
                self.set_u64(rec + abi.FIBER_STACK_HIGH, high)
        self._c_stacks = {0}
        if meta.start is not None:
            self.call_index(meta.start, [])

    def _stack_bounds(self, initial: int, gvals: list[int]) -> tuple[int, int]:
        """Where fiber 0's C stack lies: between the ``__stack_low``/``__stack_high`` globals when the module
        exports them; else below its initial pointer down to the end of the data segments (wasm-ld's layout),
        or, when the data lies above the stack (``--stack-first``), from 0."""
        exported = {e.name: gvals[e.index] & MASK32 for e in self.meta.exports if e.kind == ExternKind.GLOBAL}
        if "__stack_low" in exported and "__stack_high" in exported:
            return exported["__stack_low"], exported["__stack_high"]
        ends = [self._eval(s.offset, gvals) + s.size for s in self.meta.data if s.offset is not None]
        below = [end for end in ends if end <= initial]
        return (max(below) if below else 0), initial

    def _eval(self, expr: ConstExpr, gvals: list[int]) -> int:
        """Evaluate a constant expression (constants, global.get, references and the extended-const arithmetic;
        ``meta.from_json`` has checked that it is one, with its operands and indices in range)."""
        stack: list[int] = []
        for op, imm in expr:
            if imm is None:  # i32/i64 add, sub, mul
                b, a = stack.pop(), stack.pop()
                r = a + b if op in (Op.I32_ADD, Op.I64_ADD) else a - b if op in (Op.I32_SUB, Op.I64_SUB) else a * b
                stack.append(r & (MASK32 if op in (Op.I32_ADD, Op.I32_SUB, Op.I32_MUL) else MASK64))
            elif op == Op.GLOBAL_GET:
                stack.append(gvals[imm])
            elif op == Op.REF_NULL:
                stack.append(0)
            elif op == Op.REF_FUNC:
                stack.append(imm + 1)
            else:  # a constant's bits
                stack.append(imm)
        return stack[-1] & MASK64

    # -- calls ----------------------------------------------------------------------------------------------
    def export_index(self, name: str) -> int:
        for e in self.meta.exports:
            if e.name == name and e.kind == ExternKind.FUNC:
                return e.index
        names = ", ".join(e.name for e in self.meta.exports if e.kind == ExternKind.FUNC)
        raise CallError(f"no exported function {name!r} (exports: {names or 'none'})")

    def func_types(self, index: int) -> tuple[list[str], list[str]]:
        """Parameter and result types of function ``index``, by name (``"i32"`` ...)."""
        sig = self.meta.types[self.meta.funcs[index].type]
        return [str(t) for t in sig.params], [str(t) for t in sig.results]

    def global_value(self, name: str, fiber: int = 0) -> int:
        """The current value of an exported global, as raw bits (i32/f32 in the low 32, unsigned)."""
        for e in self.meta.exports:
            if e.name == name and e.kind == ExternKind.GLOBAL:
                g = e.index
                if g == self.meta.stack_pointer_global:
                    v = self.u64(self._fiber_rec(fiber) + abi.FIBER_STACK_POINTER)
                else:
                    v = self.u64(abi.GLOBALS + 8 * g)
                return v & MASK32 if self.meta.globals[g].type in _NARROW else v
        raise CallError(f"no exported global {name!r}")

    def call(self, name: str, *args: int, fiber: int = 0, budget: int = DEFAULT_BUDGET) -> list[int]:
        """Call an exported function to completion (continuing across PENDING); results as Python ints
        (i32/i64 signed; f32/f64 as their raw bits)."""
        return self.call_index(self.export_index(name), list(args), fiber=fiber, budget=budget)

    def call_index(self, index: int, args: list[int], *, fiber: int = 0, budget: int = DEFAULT_BUDGET) -> list[int]:
        res = self.start(index, args, fiber=fiber, budget=budget)
        while isinstance(res, Pending):
            if res.yielded and self.on_yield is not None:
                self.on_yield(self, fiber)
            res = self.resume(res.token, budget=budget)
        return res

    def _fiber_rec(self, fiber: int) -> int:
        if not 0 <= fiber < self.fibers:
            raise CallError(f"no fiber {fiber} (this build has {self.fibers})")
        return abi.FIBERS + fiber * abi.FIBER_SIZE

    def _stack_base(self, fiber: int) -> int:
        base = abi.STACKS + fiber * self.stack_size
        if fiber not in self._committed_stacks:
            self.commit(base, base + self.stack_size)
            self._committed_stacks.add(fiber)
        return base

    def start(self, index: int, args: list[int], *, fiber: int = 0,
              budget: int = DEFAULT_BUDGET) -> list[int] | Pending:
        """Begin a call on ``fiber``; returns the results, or ``Pending`` with a continuation token."""
        f = self.meta.funcs[index]
        if f.entry is None:
            imp = [x for x in self.meta.imports if x.kind == ExternKind.FUNC][index]
            raise CallError(f"function {index} is the import {imp.module}.{imp.name}, which has no body to call")
        params = self.meta.types[f.type].params
        if len(args) != len(params):
            raise CallError(f"{f.name} takes {len(params)} argument(s), got {len(args)}")
        for k, (t, v) in enumerate(zip(params, args, strict=True)):
            bits = 32 if t in _NARROW else 64
            if not -(1 << (bits - 1)) <= v < (1 << bits):  # a signed value or the raw bits of one
                raise CallError(f"{f.name}: argument {k + 1} ({t}) is {v}, outside [{-(1 << (bits - 1))}, "
                                f"{(1 << bits) - 1}]")
        _check_budget(budget)
        rec = self._fiber_rec(fiber)
        if fiber not in self._c_stacks and self.meta.stack_pointer_global is not None:
            self._c_stack(fiber)
        state = self.u64(rec + abi.FIBER_STATE)
        if state & MASK32 < abi.SPECIAL_BASE:
            raise CallError(f"fiber {fiber} has a call in progress; continue it or reset the fiber first")
        fp = self._stack_base(fiber)
        self.set_u64(fp + abi.FRAME_CALLER, 0)
        self.set_u64(fp + abi.FRAME_RETURN, abi.RETURN_TO_HOST)
        for j, (t, v) in enumerate(zip(params, args, strict=True)):
            self.set_u64(fp + abi.FRAME_LOCALS + 8 * j, v & (MASK32 if t in _NARROW else MASK64))
        self.set_u64(rec + abi.FIBER_STATE, abi.state(fp, f.entry))
        self._calls = getattr(self, "_calls", {})
        self._calls[fiber] = index
        gen = self.u64(rec + abi.FIBER_GENERATION)
        return self._run(fiber, gen, budget)

    def _c_stack(self, fiber: int) -> None:
        """Give ``fiber`` its own C shadow stack: C_STACK_PAGES wasm pages grown at the end of linear memory
        (as a host-side memory.grow), its stack pointer at their top."""
        ctrl = abi.CTRL
        pages = self.u64(ctrl + abi.CTRL_MEM_PAGES)
        new = pages + C_STACK_PAGES
        if new > self.u64(ctrl + abi.CTRL_MEM_MAX_PAGES):
            raise CallError(f"no room for fiber {fiber}'s C stack: linear memory is at its maximum")
        self.commit(pages * abi.WASM_PAGE, new * abi.WASM_PAGE)
        self.set_u64(ctrl + abi.CTRL_MEM_PAGES, new)
        self.set_u64(ctrl + abi.CTRL_MEM_BYTES, new * abi.WASM_PAGE)
        self.set_u64(ctrl + abi.CTRL_COMMITTED, max(self.u64(ctrl + abi.CTRL_COMMITTED), new * abi.WASM_PAGE))
        rec = abi.FIBERS + fiber * abi.FIBER_SIZE
        self.set_u64(rec + abi.FIBER_STACK_POINTER, new * abi.WASM_PAGE)
        self.set_u64(rec + abi.FIBER_STACK_LOW, pages * abi.WASM_PAGE)
        self.set_u64(rec + abi.FIBER_STACK_HIGH, new * abi.WASM_PAGE)
        self._c_stacks.add(fiber)

    def resume(self, token: int, *, budget: int = DEFAULT_BUDGET) -> list[int] | Pending:
        """Continue a pending call. A token from before a ``reset`` (or made up) is refused."""
        _check_budget(budget)
        fiber, gen = token >> 32, token & MASK32
        rec = self._fiber_rec(fiber) if 0 <= fiber < self.fibers else None
        if rec is None or self.u64(rec + abi.FIBER_GENERATION) != gen or \
                self.u64(rec + abi.FIBER_STATE) & MASK32 >= abi.SPECIAL_BASE:
            raise CallError(f"stale or invalid continuation token {token:#x}")
        return self._run(fiber, gen, budget)

    def reset(self, fiber: int) -> None:
        """Abandon whatever the fiber was doing; its old continuation tokens stop working."""
        rec = self._fiber_rec(fiber)
        self.set_u64(rec + abi.FIBER_GENERATION, (self.u64(rec + abi.FIBER_GENERATION) + 1) & MASK32 or 1)
        self.set_u64(rec + abi.FIBER_STATE, abi.RETURN_TO_HOST)

    def _invoke(self, fiber: int, gen: int, budget: int) -> tuple[int, int]:
        """Runs on ``fiber`` until one ends in something other than PENDING, or ``repeat`` of them have: one
        BPF_PROG_TEST_RUN whose repeated runs continue the fiber (the packet, which carries the context,
        persists between them). A caller's own budget gets one run; an open-ended call doubles the runs per
        syscall while they keep ending PENDING. Returns (status, detail). A split object is started in the
        program that holds the fiber's next region (any would hand it over, at the cost of a tail call)."""
        repeat = 1 if budget < DEFAULT_BUDGET else self._repeat
        ctx = struct.pack("<IIQQQQQQ", fiber, gen, budget, abi.Status.PENDING, 0, 0, 0, 0)
        prog = self.prog
        if len(self.programs) > 1:
            state = self.u64(self._fiber_rec(fiber) + abi.FIBER_STATE) & MASK32
            prog = self.programs[self.meta.part_of(state & abi.MAX_PHYS)]
        t0 = time.perf_counter_ns()
        res = prog.test_run(data_in=ctx, repeat=repeat)
        self.stats.wall_ns += time.perf_counter_ns() - t0
        _, _, _, status, detail, transitions, _, _ = struct.unpack("<IIQQQQQQ", res.data_out[: abi.CTX_SIZE])
        self.stats.invocations += 1
        self.stats.transitions += transitions
        self._repeat = min(MAX_REPEAT, self._repeat * 2) if status == abi.Status.PENDING else 1
        return status, detail

    def _grow(self, needed: int) -> None:
        """Serve status GROW: back linear memory up to ``needed`` bytes and, so that the next grows need no
        round trip, an eighth more (at least GROW_AHEAD), within the maximum. The guest's memory.grow then
        retries; anything the host cannot back makes that grow fail, as past the maximum."""
        if not self.can_grow:
            return
        ctrl = abi.CTRL
        committed = self.u64(ctrl + abi.CTRL_COMMITTED)
        limit = min(self.u64(ctrl + abi.CTRL_MEM_MAX_PAGES) * abi.WASM_PAGE, abi.RT_BASE)
        if committed < needed <= limit:
            ahead = min(limit, max(needed, committed + max(GROW_AHEAD, committed // 8)))
            self.commit(committed, ahead)
            self.set_u64(ctrl + abi.CTRL_COMMITTED, ahead)

    def _run(self, fiber: int, gen: int, budget: int) -> list[int] | Pending:
        status, detail = self._invoke(fiber, gen, budget)
        while status == abi.Status.GROW:
            self._grow(detail)
            status, detail = self._invoke(fiber, gen, budget)
        if status == abi.Status.PENDING:
            return Pending((fiber << 32) | gen)
        if status == abi.Status.YIELD:
            return Pending((fiber << 32) | gen, yielded=True)
        if status == abi.Status.EXIT:
            raise GuestExit(signed(detail, 32))
        if status == abi.Status.BAD_TOKEN:
            raise CallError(f"the kernel refused the continuation for fiber {fiber} (stale generation)")
        index = self._calls[fiber]
        if status == abi.Status.TRAP:
            raise GuestTrap(abi.Trap(detail).message, self.backtrace(fiber), code=abi.Trap(detail))
        results = self.meta.types[self.meta.funcs[index].type].results
        fp = abi.STACKS + fiber * self.stack_size
        out = []
        for j, t in enumerate(results):
            v = self.u64(fp + abi.FRAME_LOCALS + 8 * j)
            if t == ValType.I32:
                v = signed(v, 32)
            elif t == ValType.I64:
                v = signed(v, 64)
            elif t == ValType.F32:
                v &= MASK32
            out.append(v)
        return out

    def backtrace(self, fiber: int) -> list[str]:
        """Function names from the trapping function outwards, read from the fiber's software stack."""
        rec = self._fiber_rec(fiber)
        regions = self.meta.regions
        funcs = self.meta.funcs
        names = []
        inlined = self.u64(rec + abi.FIBER_TRAP_INLINED)
        if inlined:  # the trap was in a callee's body inlined into the trapping function
            names.append(funcs[inlined - 1].name)
        trap_region = self.u64(rec + abi.FIBER_TRAP_REGION) & MASK32
        if trap_region in regions:
            names.append(funcs[regions[trap_region]].name)
        fp = self.u64(rec + abi.FIBER_TRAP_FP) & MASK32
        for _ in range(BACKTRACE_DEPTH):
            if not fp:
                break
            ret = self.u64(fp + abi.FRAME_RETURN) & MASK32
            if ret == abi.RETURN_TO_HOST or ret not in regions:
                break
            names.append(funcs[regions[ret]].name)
            fp = self.u64(fp + abi.FRAME_CALLER) & MASK32
        else:
            if fp and self.u64(fp + abi.FRAME_RETURN) & MASK32 != abi.RETURN_TO_HOST:
                names.append("...")  # deeper frames (a runaway recursion has ~10^5 of them) are not listed
        return names

    def run_time_ns(self) -> int:
        """BPF run time of all the object's programs, as the kernel accounts it (with bpf_stats enabled)."""
        return sum(p.info().run_time_ns for p in self.programs)

    @property
    def switches(self) -> int:
        """Tail calls between the programs of a split object, on all fibers so far."""
        return sum(self.u64(abi.FIBERS + f * abi.FIBER_SIZE + abi.FIBER_SWITCHES) for f in range(self.fibers))


def _check_budget(budget: int) -> None:
    """A run with no transitions allowed makes no progress: it would end PENDING for ever."""
    if budget < 1:
        raise CallError(f"a budget must be at least 1 region transition, got {budget}")


def load(program: ObjectSpec | str | Path, *, imports: dict[tuple[str, str], int] | None = None,
         log_level: int = 0) -> Instance:
    return Instance(program, imports=imports, log_level=log_level)


__all__ = ["Instance", "RunStats", "load", "LogLevel", "replace"]
