"""A hook build loaded and prepared for attaching: everything a non-sleepable program cannot do, done first.

``HookProgram`` loads an object built with ``Options(hook=...)`` (``capsule build --hook``): the run entry
(for the host's own calls) and the hook entry share one window. Before anything is attached it

- commits the hook block and, for every fiber that will run packets, its software stack, a C stack, a
  packet buffer and a packet-info record (in linear memory, where the handler reads them);
- runs the guest runtime's set-up (``capsule_hook_start``: the heap, grown now to its full size while the
  host can still back pages; the static constructors) and the program's own ``capsule_init``, on the host's
  fiber (the last one);
- writes the configuration (budget, default verdict, snap length, the heap lock), and freezes memory: from
  then on a ``memory.grow`` past what is committed fails, on the hook and in the host's calls alike.

It also runs the hook entry on crafted frames (``run``: BPF_PROG_TEST_RUN, the same program that would be
attached), and reads what the kernel counted and what the guest keeps (``counters``, ``read``/``write`` of
the program's global variables by name).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path

from capsule.bpf.elf import read_object
from capsule.bpf.spec import ObjectSpec
from capsule.compiler import abi
from capsule.compiler import hook_abi as h
from capsule.kernel.collection import load_program
from capsule.kernel.errors import VerifierError
from capsule.kernel.maps import possible_cpus
from capsule.runtime import CallError, GuestRejected, Instance
from capsule.wasm import ExternKind

DEFAULT_BUDGET = 1 << 20  # region transitions and loop iterations per packet
DEFAULT_SNAPLEN = 2048  # packet bytes copied into the window
DEFAULT_HEAP = 16 << 20  # bytes of heap prepared before attaching
VERDICTS = {"pass": h.Verdict.PASS, "drop": h.Verdict.DROP}


class HookError(CallError):
    """The hook program could not be prepared, configured or attached as asked."""


@dataclass
class HookStats:
    """What the kernel counted, summed over the fibers (``per_fiber``: each fiber's own), plus the packets
    that came on a CPU without a fiber or while the hook was paused."""

    packets: int = 0
    passed: int = 0
    dropped: int = 0
    tx: int = 0
    defaulted: int = 0
    budget: int = 0
    traps: int = 0
    exits: int = 0
    bad_verdict: int = 0
    transitions: int = 0
    ring_drops: int = 0
    writebacks: int = 0
    lock_breaks: int = 0
    no_fiber: int = 0
    disabled: int = 0
    run_cnt: int = 0  # bpf_stats of the hook program (0 unless stats were enabled)
    run_time_ns: int = 0
    per_fiber: list[dict[str, int]] = field(default_factory=list)

    @property
    def ns_per_packet(self) -> float:
        return self.run_time_ns / self.run_cnt if self.run_cnt else 0.0


_FIELDS = {"pass": "passed", "drop": "dropped", "tx": "tx"}


class HookProgram:
    """A hook object loaded into the kernel and prepared (``prepare``) to be attached or test-run."""

    def __init__(self, program: ObjectSpec | str | Path, *, heap: int = DEFAULT_HEAP, budget: int = DEFAULT_BUDGET,
                 snaplen: int = DEFAULT_SNAPLEN, default_verdict: str = "pass", ring_size: int | None = None,
                 log_level: int = 0) -> None:
        spec = program if isinstance(program, ObjectSpec) else read_object(Path(program))
        section = spec.extra_sections.get(h.HOOK_SECTION)
        if section is None or h.HOOK_PROGRAM not in spec.programs:
            raise HookError("not a hook program (build it with --hook xdp or --hook tc)")
        self.info = json.loads(section)
        self.kind: str = self.info["hook"]
        self.variables: dict[str, int] = dict(self.info.get("vars", {}))
        if ring_size is not None:
            ring = spec.maps[h.RING_MAP]
            spec = replace(spec, maps={**spec.maps, h.RING_MAP: replace(ring, max_entries=ring_size)})
        self.inst = Instance(spec, log_level=log_level)
        try:
            try:
                self.prog = load_program(spec.programs[h.HOOK_PROGRAM], self.inst.coll.maps, self.inst.coll.btf_fd,
                                         log_level=log_level)
            except VerifierError as e:
                raise GuestRejected(self.inst._guest_at(e.insn_index), e) from e
            self.inst.coll.programs[h.HOOK_PROGRAM] = self.prog  # closed with the collection
            self.host_fiber = self.inst.fibers - 1
            self.fibers = self.host_fiber  # fibers that run packets: CPUs 0 .. fibers - 1
            self.prepared = False
            self.prepare(heap=heap)
            self.configure(budget=budget, snaplen=snaplen, default_verdict=default_verdict, enabled=True)
        except BaseException:
            self.inst.close()
            raise

    # -- lifetime -------------------------------------------------------------------------------------------
    def close(self) -> None:
        self.inst.close()

    def __enter__(self) -> HookProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- preparation ------------------------------------------------------------------------------------------
    def has_export(self, name: str) -> bool:
        return any(e.name == name and e.kind == ExternKind.FUNC for e in self.inst.meta.exports)

    def call(self, name: str, *args: int) -> list[int]:
        """Call an exported function on the host's fiber (never one that runs packets)."""
        return self.inst.call(name, *args, fiber=self.host_fiber)

    def prepare(self, *, heap: int = DEFAULT_HEAP) -> None:
        """Back and lay out everything the packets will use, run the guest's set-up, freeze memory."""
        cpus = possible_cpus()
        if self.fibers < cpus:
            raise HookError(f"this machine has {cpus} CPUs but the program has {self.fibers} packet fibers "
                            f"(build it with --fibers {cpus + 1} or more)")
        inst = self.inst
        inst.commit(h.HOOK, h.HOOK_FIBERS + abi.MAX_FIBERS * h.FB_SIZE)
        if self.has_export(h.START_EXPORT) and self.call(h.START_EXPORT, heap)[0] != 0:
            raise HookError(f"the guest could not prepare a heap of {heap} bytes")
        if self.has_export(h.INIT_EXPORT):
            self.call(h.INIT_EXPORT)
        per_fiber = h.PKT_MAX + h.INFO_SIZE
        pages = -(-per_fiber * self.fibers // abi.WASM_PAGE)
        base = self._grow_pages(pages)
        for f in range(self.fibers):
            inst._stack_base(f)  # the software stack, committed
            if inst.meta.stack_pointer_global is not None and f not in inst._c_stacks:
                inst._c_stack(f)
            rec = abi.FIBERS + f * abi.FIBER_SIZE
            block = h.fiber_block(f)
            pkt = base + f * per_fiber
            inst.set_u64(block + h.FB_PKT, pkt)
            inst.set_u64(block + h.FB_INFO, pkt + h.PKT_MAX)
            inst.set_u64(block + h.FB_SP, inst.u64(rec + abi.FIBER_STACK_POINTER))
        if self.has_export(h.LOCK_EXPORT):
            inst.set_u64(h.HOOK + h.CFG_LOCK, self.call(h.LOCK_EXPORT)[0] & 0xFFFF_FFFF)
        inst.set_u64(h.HOOK + h.CFG_FIBERS, self.fibers)
        # from here on nothing grows: the packets' programs could not be told about new pages
        inst.set_u64(abi.CTRL + abi.CTRL_COMMITTED, inst.memory_size)
        inst.can_grow = False
        self.prepared = True

    def _grow_pages(self, pages: int) -> int:
        """Grow linear memory by ``pages`` wasm pages from the host (as ``Instance._c_stack`` does); their
        address."""
        inst, ctrl = self.inst, abi.CTRL
        old = inst.u64(ctrl + abi.CTRL_MEM_PAGES)
        new = old + pages
        if new > inst.u64(ctrl + abi.CTRL_MEM_MAX_PAGES):
            raise HookError("no room in linear memory for the packet buffers (raise the memory maximum)")
        inst.commit(old * abi.WASM_PAGE, new * abi.WASM_PAGE)
        inst.set_u64(ctrl + abi.CTRL_MEM_PAGES, new)
        inst.set_u64(ctrl + abi.CTRL_MEM_BYTES, new * abi.WASM_PAGE)
        inst.set_u64(ctrl + abi.CTRL_COMMITTED, max(inst.u64(ctrl + abi.CTRL_COMMITTED), new * abi.WASM_PAGE))
        return old * abi.WASM_PAGE

    def configure(self, *, budget: int | None = None, snaplen: int | None = None,
                  default_verdict: str | None = None, enabled: bool | None = None) -> None:
        """Change what every packet reads: safe while attached (each value is one aligned 8-byte store)."""
        inst, cfg = self.inst, h.HOOK
        if budget is not None:
            if budget < 1:
                raise HookError(f"a budget must be at least 1, got {budget}")
            inst.set_u64(cfg + h.CFG_BUDGET, budget)
        if snaplen is not None:
            if not 0 <= snaplen <= h.PKT_MAX:
                raise HookError(f"the snap length must be between 0 and {h.PKT_MAX} bytes, got {snaplen}")
            inst.set_u64(cfg + h.CFG_SNAPLEN, snaplen)
        if default_verdict is not None:
            if default_verdict not in VERDICTS:
                raise HookError(f"no default verdict {default_verdict!r} (there are: {', '.join(VERDICTS)})")
            inst.set_u64(cfg + h.CFG_DEFAULT, VERDICTS[default_verdict])
        if enabled is not None:
            inst.set_u64(cfg + h.CFG_ENABLED, int(enabled))

    # -- running and reading ------------------------------------------------------------------------------
    def run(self, frame: bytes, *, repeat: int = 1) -> tuple[int, bytes]:
        """Run the hook entry on one frame (BPF_PROG_TEST_RUN on this CPU's fiber): (action, frame after)."""
        res = self.prog.test_run(frame, repeat=repeat)
        return res.retval, res.data_out[: len(frame)]

    def counters(self, fiber: int) -> dict[str, int]:
        block = h.fiber_block(fiber)
        return {name: self.inst.u64(block + h.FB_PACKETS + 8 * k) for k, name in enumerate(h.COUNTERS)}

    def stats(self) -> HookStats:
        st = HookStats()
        for f in range(self.fibers):
            c = self.counters(f)
            st.per_fiber.append(c)
            for name, v in c.items():
                attr = _FIELDS.get(name, name)
                setattr(st, attr, getattr(st, attr) + v)
        st.no_fiber = self.inst.u64(h.HOOK + h.G_NO_FIBER)
        st.disabled = self.inst.u64(h.HOOK + h.G_DISABLED)
        info = self.prog.info()
        st.run_cnt, st.run_time_ns = info.run_cnt, info.run_time_ns
        return st

    def address(self, name: str) -> tuple[int, int]:
        """(guest address, size) of the program's global variable ``name`` (exported by the hook build)."""
        if name not in self.variables:
            known = ", ".join(sorted(self.variables)) or "none"
            raise HookError(f"no global variable {name!r} in the program (its globals: {known})")
        return self.inst.global_value(name) & 0xFFFF_FFFF, self.variables[name]

    def read(self, name: str) -> int:
        """A global variable's value (unsigned, little-endian, up to 8 bytes) or a wasm global's."""
        if name not in self.variables and any(e.name == name and e.kind == ExternKind.GLOBAL
                                              for e in self.inst.meta.exports):
            return self.inst.global_value(name)
        addr, size = self.address(name)
        if size > 8:
            raise HookError(f"{name} is {size} bytes: use read_bytes")
        return int.from_bytes(self.inst.mem[addr : addr + size], "little")

    def read_bytes(self, name: str) -> bytes:
        addr, size = self.address(name)
        return bytes(self.inst.mem[addr : addr + size])

    def write(self, name: str, value: int | bytes) -> None:
        """Set a global variable (an integer of its size, or its bytes): seen by the next packet on every CPU."""
        addr, size = self.address(name)
        data = value if isinstance(value, bytes) else (value % (1 << (8 * size))).to_bytes(size, "little")
        if len(data) != size:
            raise HookError(f"{name} is {size} bytes, got {len(data)}")
        self.inst.mem[addr : addr + size] = data

    def u32(self, addr: int) -> int:
        return int(struct.unpack_from("<I", self.inst.mem, addr)[0])
