"""The host's half of the Lua observer (``capsule/guest/hook/lua_observer.c``): load a script into every
CPU's VM before attaching, and restore a VM that a packet left unfinished.

A Lua error inside ``on_packet`` is the guest's business (caught, reported, the VM goes on). A packet
abandoned inside the VM (its capsule budget ran out in C code, or it trapped) may leave the VM's state half
changed; the guest then marks the VM broken and gives its CPU's packets the default verdict until the host
has copied back the VM's heap region and state as they were right after the script's top level ran. That
snapshot is taken once, here, when the script is loaded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from capsule.compiler import hook_abi as h
from capsule.kernel.ringbuf import RingBuffer

from .program import HookError, HookProgram
from .ring import Stream

VM_HEAP = 4 << 20  # bytes of heap per VM
HEAP_STATE = 448  # sizeof(struct capsule_heap), capsule/guest/hook/heap.h
VM_SIZE = 32 + HEAP_STATE  # sizeof(struct lua_vm)
VM_STATE, VM_REGION, VM_BYTES = 0, 12, 16
READY, BROKEN = 1, 2
COUNTS = ("packets", "errors", "aborts", "skipped")  # struct lua_vm_counts, u64 each


class LuaVMs:
    """The per-CPU VMs of a loaded observer, with their snapshots."""

    def __init__(self, prog: HookProgram, script: str, *, vm_heap: int = VM_HEAP,
                 on_line: Callable[[int, int, str], None] | None = None) -> None:
        self.prog = prog
        mem = prog.inst.mem
        data = script.encode()
        for f in range(prog.fibers):  # a script loaded before (the VM's heap goes back to the shared one)
            prog.call("capsule_lua_close", f)
        buf = prog.call("capsule_lua_setup", len(data), vm_heap)[0] & 0xFFFF_FFFF
        if not buf:
            raise HookError(f"the guest has no memory for a {len(data)}-byte script")
        mem[buf : buf + len(data)] = data
        self.base = prog.call("capsule_lua_vms")[0] & 0xFFFF_FFFF
        self.counts_base = prog.call("capsule_lua_counts")[0] & 0xFFFF_FFFF
        said: list[str] = []

        def keep(fiber: int, fd: int, line: str) -> None:
            said.append(line)
            if on_line is not None:
                on_line(fiber, fd, line)

        with RingBuffer(prog.inst.coll.maps[h.RING_MAP]) as ring:
            stream = Stream(ring, prog.inst.meta, keep)
            for f in range(prog.fibers):
                rc = prog.call("capsule_lua_open", f)[0]
                stream.drain()
                if rc != 0:
                    stream.lines.flush()
                    why = next((s for s in reversed(said) if s.startswith("lua")), "the VM could not be made")
                    raise HookError(f"the Lua script does not start: {why}")
            stream.lines.flush()
        self.snapshots = [self._snapshot(f) for f in range(prog.fibers)]

    def _vm(self, f: int) -> int:
        return self.base + f * VM_SIZE

    def _snapshot(self, f: int) -> tuple[bytes, int, bytes]:
        mem, vm = self.prog.inst.mem, self._vm(f)
        region, size = struct.unpack_from("<II", mem, vm + VM_REGION)
        return bytes(mem[vm : vm + VM_SIZE]), region, bytes(mem[region : region + size])

    def state(self, f: int) -> int:
        return int(struct.unpack_from("<I", self.prog.inst.mem, self._vm(f) + VM_STATE)[0])

    def counts(self, f: int) -> dict[str, int]:
        at = self.counts_base + f * 8 * len(COUNTS)
        return dict(zip(COUNTS, struct.unpack_from(f"<{len(COUNTS)}Q", self.prog.inst.mem, at), strict=True))

    def restore_broken(self) -> list[int]:
        """Restore every VM marked broken (its packets get the default verdict meanwhile); the CPUs done.
        The state word goes last, so the guest takes the VM back only when it is whole."""
        mem, done = self.prog.inst.mem, []
        for f in range(self.prog.fibers):
            if self.state(f) != BROKEN:
                continue
            vm_bytes, region, heap = self.snapshots[f]
            vm = self._vm(f)
            mem[region : region + len(heap)] = heap
            mem[vm + 4 : vm + VM_SIZE] = vm_bytes[4:]
            mem[vm : vm + 4] = vm_bytes[:4]
            done.append(f)
        return done


def load_script(prog: HookProgram, script: Path | str, *, vm_heap: int = VM_HEAP,
                on_line: Callable[[int, int, str], None] | None = None) -> LuaVMs:
    """Load a Lua script (a path, or its text) into every packet fiber's VM."""
    if isinstance(script, Path):
        try:
            text = script.read_text()
        except OSError as e:
            raise HookError(f"{script}: {e.strerror}") from None
    else:
        text = script
    if not prog.has_export("capsule_lua_open"):
        raise HookError("the program is not the Lua observer (attach --lua builds it)")
    return LuaVMs(prog, text, vm_heap=vm_heap, on_line=on_line)
