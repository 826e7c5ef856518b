"""How compiled code reaches the window: the memory tier, as pointer forms the rest of the compiler asks for.

A guest address is a window offset (``abi``): linear memory from 0, the runtime area (control block, globals,
tables, fiber records, software stacks) from ``abi.RT_BASE``. Each access site knows which of the two it
touches, so no address is routed at run time:

- **arena** (kernels with ``BPF_MAP_TYPE_ARENA``): ``addr_space_cast`` turns the address into an arena pointer;
  one instruction, the JIT adds the arena's base.
- **map** (older kernels, e.g. Debian 12's 6.1): each area is one piece, the value of a one-element mmapable
  ARRAY (a ``.bss`` section of the object, so ``ld_imm64`` of the map value is its address). A pointer is
  ``piece + (address & (size - 1))``: the mask is what lets the verifier bound the variable offset (an access
  must end within the value), and since every area starts at a multiple of its size it is also the address's
  offset in the piece. Each piece is ``size + slack`` bytes, so that an instruction's constant offset past the
  masked address stays inside the value. The host maps the pieces at their window addresses, so it shares the
  pages exactly as with the arena. Growth happens within the pieces created at load.

  The runtime area is three pieces, each sized for the build, because its layout (``abi``) is sparse: the
  control block, globals, function info and tables (up to the last table's reach), the fiber records, and the
  fibers' stacks. One piece spanning them all would be 128 MiB for any build (the stacks start 64 MiB in), and
  an array map's value is allocated whole.

``capsule/compiler/memory.py`` lowers the wasm memory instructions on these forms; ``dispatcher``, ``calls``
and ``intrinsics`` take their frame, fiber and runtime pointers from here. (A module of its own because those
three sit below ``memory`` in the import order.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from capsule.bpf.asm import Reg, addr_space_cast, alu, ld_map_fd, ld_map_value, mov
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu
from capsule.bpf.spec import MapSpec
from capsule.bpf.uapi import MapFlags, MapType

from . import abi

# what a pointer points into: linear memory, the runtime records (control block, globals, function info,
# tables), a fiber record, or a fiber's stack (frames)
Area = Literal["memory", "runtime", "fiber", "stack"]
MiB = 1 << 20
# the largest piece: the verifier bounds a variable offset at 512 MiB, and every kernel probed accepts an
# mmapable ARRAY value of 256 MiB (capsule.kernel.probe, array_value_max), which a piece and its slack fit
MAX_PIECE = 128 * MiB
# linear memory's piece when the module does not bound its memory lower (``Options.window_piece`` = 0)
DEFAULT_MEMORY_PIECE = 64 * MiB
# past the masked address: an access's constant offset (< 32 KiB, larger ones are added before the mask)
MEMORY_SLACK = 64 << 10
# past a frame pointer: the largest constant offset compiled code adds to one
STACK_SLACK = 1 * MiB
# past a runtime or fiber pointer (a table element, a field of a record) and in the pieces' host mapping
RECORD_SLACK = abi.PAGE


def _pow2_at_least(n: int) -> int:
    size = 1
    while size < n:
        size <<= 1
    return size


@dataclass(frozen=True)
class Window:
    """The tier, and for the map tier its pieces' sizes (powers of two; 0 for the arena)."""

    kind: Literal["arena", "map"]
    memory_piece: int = 0
    runtime_piece: int = 0
    fiber_piece: int = 0
    stack_piece: int = 0

    @staticmethod
    def map(fibers: int, stack_size: int, memory_bytes: int, tables: Sequence[int | None] = ()) -> Window:
        """The map tier for a build: a memory piece holding ``memory_bytes`` (how far memory may grow), and the
        runtime area's pieces for ``fibers`` stacks of ``stack_size`` and ``tables`` (each table's maximum
        size in elements, None when unbounded). ``ValueError`` when a piece cannot fit its place."""
        reach = abi.FUNC_INFO + (abi.MAX_FUNCS * 8)  # control block, globals and function info, always
        for t, most in enumerate(tables):
            elems = abi.MAX_TABLE_ELEMS if most is None else min(most, abi.MAX_TABLE_ELEMS)
            reach = max(reach, abi.TABLES + t * abi.TABLE_STRIDE + elems * 8)
        runtime = _pow2_at_least(reach - abi.RT_BASE)
        fiber = _pow2_at_least(max(fibers * abi.FIBER_SIZE, abi.PAGE))
        stack = _pow2_at_least(fibers * stack_size)
        memory = _pow2_at_least(max(memory_bytes, abi.WASM_PAGE))
        if abi.RT_BASE + runtime + RECORD_SLACK > abi.FIBERS:
            raise ValueError(f"the map window's runtime piece holds the tables up to "
                             f"{(abi.FIBERS - abi.RT_BASE) >> 20} MiB in; {len(tables)} tables reach "
                             f"{(reach - abi.RT_BASE) >> 20} MiB: give the tables a maximum")
        if stack > abi.STACKS & -abi.STACKS or stack > MAX_PIECE:
            raise ValueError(f"the map window's stacks ({fibers} fibers of {stack_size >> 20} MiB stacks) "
                             f"need {stack >> 20} MiB, more than a piece's {(abi.STACKS & -abi.STACKS) >> 20} MiB: "
                             f"use fewer fibers or smaller stacks")
        if memory > MAX_PIECE:
            raise ValueError(f"the map window holds at most {MAX_PIECE >> 20} MiB of linear memory, "
                             f"{memory_bytes >> 20} MiB asked")
        return Window("map", memory, runtime, fiber, stack)

    @property
    def is_map(self) -> bool:
        return self.kind == "map"

    def _piece(self, area: Area) -> tuple[str, int]:
        return {"memory": (abi.MEMORY_PIECE, self.memory_piece), "runtime": (abi.RUNTIME_PIECE, self.runtime_piece),
                "fiber": (abi.FIBER_PIECE, self.fiber_piece), "stack": (abi.STACK_PIECE, self.stack_piece)}[area]

    def pointer(self, area: Area, dst: Reg, src: Reg, scratch: Reg | None = None) -> list[Insn]:
        """``dst`` = a pointer to the guest address in ``src``. In the map tier, without ``scratch`` ``src`` is
        clobbered (and must differ from ``dst``); with it, ``scratch`` is, and ``src`` is kept."""
        if not self.is_map:
            return [addr_space_cast(dst, src, 0, 1)]
        name, size = self._piece(area)
        if scratch is None:
            assert dst != src, "the map tier needs a second register"
            return [alu(Alu.AND, src, size - 1), ld_map_value(dst, name), alu(Alu.ADD, dst, src)]
        assert scratch not in (dst, src)
        head = [] if dst == src else [mov(dst, src)]
        return [*head, alu(Alu.AND, dst, size - 1), ld_map_value(scratch, name), alu(Alu.ADD, dst, scratch)]

    def masked_pointer(self, dst: Reg, mask: int, scratch: Reg) -> list[Insn]:
        """``dst`` (a linear-memory address, already in it) becomes a pointer, the address masked with
        ``mask`` too (fast mode: no access leaves memory); ``scratch`` is clobbered."""
        if not self.is_map:
            return [addr_space_cast(dst, dst, 0, 1), alu(Alu.AND, dst, mask, w32=True)]
        return [alu(Alu.AND, dst, mask & (self.memory_piece - 1)), ld_map_value(scratch, abi.MEMORY_PIECE),
                alu(Alu.ADD, dst, scratch)]

    def bounded(self, area: Area, offset: Reg) -> list[Insn]:
        """An offset about to be added to a pointer into ``area``, bounded for the verifier in the map tier
        (a no-op on the values compiled code computes: they are checked against the area's sizes first)."""
        return [alu(Alu.AND, offset, self._piece(area)[1] - 1)] if self.is_map else []

    def runtime_base(self, dst: Reg) -> list[Insn]:
        """``dst`` = a pointer to ``abi.RT_BASE``."""
        if not self.is_map:
            return [mov(dst, abi.RT_BASE, w32=True), addr_space_cast(dst, dst, 0, 1)]
        return [ld_map_value(dst, abi.RUNTIME_PIECE)]

    def entry_reference(self, dst: Reg) -> list[Insn]:
        """What makes the entry program the window's user: the arena must be named by a program that casts
        into it; a map piece is named by every pointer made from it."""
        return [] if self.is_map else [ld_map_fd(dst, abi.WINDOW_MAP)]

    def maps(self) -> dict[str, MapSpec]:
        """The window's maps in the object."""
        if not self.is_map:
            return {abi.WINDOW_MAP: MapSpec(abi.WINDOW_MAP, MapType.ARENA, 0, 0, abi.GIB4 // abi.PAGE,
                                            flags=MapFlags.MMAPABLE)}
        pieces = ((abi.MEMORY_PIECE, self.memory_piece + MEMORY_SLACK),
                  (abi.RUNTIME_PIECE, self.runtime_piece + RECORD_SLACK),
                  (abi.FIBER_PIECE, self.fiber_piece + RECORD_SLACK),
                  (abi.STACK_PIECE, self.stack_piece + STACK_SLACK))
        return {name: MapSpec(name, MapType.ARRAY, 4, size, 1, flags=MapFlags.MMAPABLE, section=name)
                for name, size in pieces}


ARENA = Window("arena")
