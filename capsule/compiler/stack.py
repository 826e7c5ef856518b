"""The operand stack of the function being lowered: which value each slot holds, and the code that reads,
places, spills and reloads them.

A slot's home is a register for the lowest slots and a frame slot above (``values``); a constant stays a
``Const`` until it is needed in a register or a join needs it placed (``materialize``). Leaving a region
stores the register-homed slots (and the locals kept in registers) to the frame, entering one loads them
back (``spill_regs``/``reload_regs``).
"""

from __future__ import annotations

from capsule.bpf.asm import Reg, ldx, mov, stx
from capsule.wasm import ValType

from . import abi
from .emit import T0, Emitter, load_const
from .values import FRAME, Const, Entry, Slot


class OperandStack:
    def __init__(self, out: Emitter, nlocals: int, regs: tuple[Reg, ...], local_regs: dict[int, Reg]) -> None:
        self.out = out
        self.nlocals = nlocals
        self.regs = regs  # the homes of the lowest slots
        self.local_regs = local_regs  # locals that live in registers inside a region
        self.entries: list[Entry] = []
        self.max_height = 0  # the frame gets a spill slot for each

    # -- the entries ----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, slot: int) -> Entry:
        return self.entries[slot]

    def push(self, e: Entry) -> int:
        self.entries.append(e)
        self.max_height = max(self.max_height, len(self.entries))
        return len(self.entries) - 1

    def pop(self) -> tuple[int, Entry]:
        e = self.entries.pop()
        return len(self.entries), e

    def truncate(self, height: int) -> None:
        del self.entries[height:]

    def replace_from(self, height: int, types: tuple[ValType, ...]) -> None:
        """Slots from ``height`` up hold values of ``types`` in their homes (a block's values at a join)."""
        self.entries[height:] = [Slot(t) for t in types]
        self.max_height = max(self.max_height, len(self.entries))

    def snapshot(self) -> list[Entry]:
        return list(self.entries)

    def restore(self, saved: list[Entry]) -> None:
        self.entries = list(saved)

    def reserve(self, height: int) -> None:
        """Make the frame hold spill slots up to ``height`` (for a value parked above the stack)."""
        self.max_height = max(self.max_height, height)

    # -- where values are -----------------------------------------------------------------------------------
    def home(self, slot: int) -> Reg | None:
        """The register a stack slot lives in, or None when it lives in its frame slot."""
        return self.regs[slot] if slot < len(self.regs) else None

    def spill_off(self, slot: int) -> int:
        """Frame offset of a slot's spill location (after the locals)."""
        return abi.FRAME_LOCALS + abi.SLOT * (self.nlocals + slot)

    def read(self, slot: int, e: Entry, temp: Reg) -> Reg:
        """A register holding the value of stack entry ``e`` at ``slot`` (its home register, or ``temp``)."""
        if isinstance(e, Const):
            load_const(self.out, temp, e)
            return temp
        r = self.home(slot)
        if r is not None:
            return r
        self.out.emit(ldx(8, temp, FRAME, self.spill_off(slot)))
        return temp

    def read_into(self, dst: Reg, slot: int, e: Entry) -> None:
        r = self.read(slot, e, dst)
        if r != dst:
            self.out.emit(mov(dst, r))

    def dst(self, slot: int) -> Reg:
        """The register a result for ``slot`` is computed in (its home, or T0 when the home is memory)."""
        r = self.home(slot)
        return r if r is not None else T0

    def finish(self, slot: int, reg: Reg, t: ValType) -> None:
        """Record that ``reg`` holds the new value of ``slot`` (storing it if the slot lives in memory); the
        slots above it are consumed."""
        if self.home(slot) is None:
            self.out.emit(stx(8, FRAME, self.spill_off(slot), reg))
        self.truncate(slot)
        self.push(Slot(t))

    def materialize(self, slot: int) -> None:
        """Place a constant slot's value in its home."""
        e = self.entries[slot]
        if not isinstance(e, Const):
            return
        r = self.home(slot)
        if r is not None:
            load_const(self.out, r, e)
        else:
            load_const(self.out, T0, e)
            self.out.emit(stx(8, FRAME, self.spill_off(slot), T0))
        self.entries[slot] = Slot(e.type)

    def materialize_below(self, height: int) -> None:
        for i in range(height):
            self.materialize(i)

    def materialize_all(self) -> None:
        self.materialize_below(len(self.entries))

    def move(self, src: int, dst: int) -> None:
        """Copy the value of slot ``src`` into slot ``dst`` (dst <= src) and mark it placed."""
        e = self.entries[src]
        if src == dst:
            self.materialize(dst)
            return
        rd = self.home(dst)
        if rd is not None:
            self.read_into(rd, src, e)
        else:
            r = self.read(src, e, T0)
            self.out.emit(stx(8, FRAME, self.spill_off(dst), r))
        self.entries[dst] = Slot(e.type)

    # -- region boundaries ----------------------------------------------------------------------------------
    def spill_regs(self, height: int, only: frozenset[Reg] | None = None) -> None:
        """Store register-homed slots below ``height`` to their spill locations (before leaving the region, or
        with ``only`` before a call that clobbers those registers)."""
        for i in range(min(height, len(self.regs))):
            r = self.regs[i]
            if only is None or r in only:
                self.out.emit(stx(8, FRAME, self.spill_off(i), r))
        if only is None:  # leaving the region: locals kept in registers go back to the frame
            for n, r in self.local_regs.items():
                self.out.emit(stx(8, FRAME, abi.FRAME_LOCALS + abi.SLOT * n, r))

    def reload_regs(self, height: int, only: frozenset[Reg] | None = None) -> None:
        for i in range(min(height, len(self.regs))):
            r = self.regs[i]
            if only is None or r in only:
                self.out.emit(ldx(8, r, FRAME, self.spill_off(i)))
        if only is None:  # entering a region: locals kept in registers come from the frame
            for n, r in self.local_regs.items():
                self.out.emit(ldx(8, r, FRAME, abi.FRAME_LOCALS + abi.SLOT * n))
