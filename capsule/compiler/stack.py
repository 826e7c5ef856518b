"""The operand stack of the function being lowered: which value each slot holds, and the code that reads,
places, spills and reloads them.

A slot's home is a register for the lowest slots and a frame slot above (``values``); a constant stays a
``Const``, and a ``local.get`` a ``Local``, until it is needed in a register or a join needs it placed
(``materialize``): most values an instruction consumes are then read straight from a local's register.
Leaving a region stores the register-homed slots (and the locals kept in registers) to the frame, entering
one loads them back (``spill_regs``/``reload_regs``).
"""

from __future__ import annotations

from collections.abc import Callable

from capsule.bpf.asm import Reg, mov
from capsule.bpf.insn import Insn
from capsule.wasm import ValType

from . import abi
from .emit import T0, Emitter, load_const
from .values import Const, Entry, Local, Slot, load_frame, store_frame


class OperandStack:
    def __init__(self, out: Emitter, nlocals: int, regs: tuple[Reg, ...], local_regs: dict[int, Reg],
                 next_set: Callable[[], int | None] = lambda: None, live: Callable[[], int] = lambda: -1) -> None:
        self.out = out
        self.nlocals = nlocals
        self.regs = regs  # the homes of the lowest slots
        self.local_regs = local_regs  # locals that live in registers inside a region
        self.reg_local = {r: n for n, r in local_regs.items()}
        self.next_set = next_set  # the local the next instruction sets, if it is a local.set/tee
        self.live = live  # the locals live here (a bit set, ``liveness``): only they are saved and reloaded
        self.entries: list[Entry] = []
        self.max_height = 0  # the frame gets a spill slot for each
        self._spill: tuple[int, Insn, Reg] | None = None  # the last store of a result to its memory home

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

    def local_off(self, n: int) -> int:
        return abi.FRAME_LOCALS + abi.SLOT * n

    def register_of(self, slot: int, e: Entry) -> Reg | None:
        """A register that already holds entry ``e``'s value, without any code (None if there is none)."""
        if isinstance(e, Local):
            return self.local_regs.get(e.n)
        if isinstance(e, Slot):
            return self.home(slot)
        return None

    def read(self, slot: int, e: Entry, temp: Reg, *, consume: bool = False) -> Reg:
        """A register holding the value of stack entry ``e`` at ``slot`` (its home register, a local's register,
        or ``temp``). Read only: a local's register must not be changed through it (``read_owned``).

        ``consume``: the caller pops the slot or overwrites it (``finish``) before anything reads its frame
        copy, and uses the register before it writes T0 or T1: a store of the slot that was the instruction
        just before is then dead, and is taken back, and the value is read where it was computed (an operand
        stack deeper than its registers costs no frame store between one instruction and the next)."""
        if isinstance(e, Const):
            load_const(self.out, temp, e)
            return temp
        r = self.register_of(slot, e)
        if r is not None:
            return r
        if isinstance(e, Slot) and self._spill is not None and self._spill[0] == slot \
                and self.out.just_emitted(self._spill[1]):
            # the value was stored to this slot by the instruction just before: it is still in that register
            held = self._spill[2]
            if consume:  # the store is dead and the value can be used where it is
                self.out.retract(self._spill[1])
                self._spill = None
                return held
            if held != temp:
                self.out.emit(mov(temp, held))
            return temp
        off = self.local_off(e.n) if isinstance(e, Local) else self.spill_off(slot)
        self.out.emit(load_frame(temp, off))
        return temp

    def read_owned(self, slot: int, e: Entry, temp: Reg) -> Reg:
        """As ``read``, but a register the caller may change (a local's value is copied to ``temp`` first)."""
        r = self.read(slot, e, temp)
        if isinstance(e, Local) and r != temp:
            self.out.emit(mov(temp, r))
            return temp
        return r

    def read_into(self, dst: Reg, slot: int, e: Entry, *, consume: bool = False) -> None:
        r = self.read(slot, e, dst, consume=consume)
        if r != dst:
            self.out.emit(mov(dst, r))

    def dst(self, slot: int) -> Reg:
        """The register a result for ``slot`` is computed in (its home, or T0 when the home is memory)."""
        r = self.home(slot)
        return r if r is not None else T0

    def result(self, slot: int, *later: Entry) -> Reg:
        """The register to compute ``slot``'s new value in: when the next instruction stores it into a local
        kept in a register, that register (``local.get x; i32.const 1; i32.add; local.set x`` is then one
        add), provided no pending read of the local's old value is left below and no operand in ``later`` (those
        the lowering reads after it has written the result) is that local; else ``dst``."""
        n = self.next_set()
        r = self.local_regs.get(n) if n is not None else None
        if r is None or any(isinstance(e, Local) and e.n == n for e in (*self.entries[:slot], *later)):
            return self.dst(slot)
        return r

    def finish(self, slot: int, reg: Reg, t: ValType) -> None:
        """Record that ``reg`` holds the new value of ``slot`` (storing it if the slot lives in memory); the
        slots above it are consumed. A result computed in a local's register (``result``) is that local's
        value as the next instruction, its local.set, will find it."""
        self.truncate(slot)
        n = self.reg_local.get(reg)
        if n is not None:
            self.push(Local(t, n))
            return
        if self.home(slot) is None:
            store = store_frame(self.spill_off(slot), reg)
            self.out.emit(store)
            self._spill = (slot, store, reg)
        self.push(Slot(t))

    def materialize(self, slot: int) -> None:
        """Place a constant's or a local's value in the slot's home."""
        e = self.entries[slot]
        if isinstance(e, Slot):
            return
        r = self.home(slot)
        if r is not None:
            self.read_into(r, slot, e)
        else:
            self.out.emit(store_frame(self.spill_off(slot), self.read(slot, e, T0)))
        self.entries[slot] = Slot(e.type)

    def detach_local(self, n: int, below: int) -> None:
        """Place every pending read of local ``n`` under height ``below``: the local is about to change."""
        for i in range(min(below, len(self.entries))):
            e = self.entries[i]
            if isinstance(e, Local) and e.n == n:
                self.materialize(i)

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
            self.out.emit(store_frame(self.spill_off(dst), r))
        self.entries[dst] = Slot(e.type)

    # -- region boundaries ----------------------------------------------------------------------------------
    def spill_regs(self, height: int, only: frozenset[Reg] | None = None) -> None:
        """Store register-homed slots below ``height`` and the locals kept in registers to their frame slots:
        all of them before leaving the region, or with ``only`` those registers, before a call that clobbers
        them. Pending reads of locals below ``height`` must have been placed (``materialize_below``) when the
        registers are reloaded elsewhere."""
        for i in range(min(height, len(self.regs))):
            r = self.regs[i]
            if only is None or r in only:
                self.out.emit(store_frame(self.spill_off(i), r))
        live = self.live()
        for n, r in self.local_regs.items():
            if (only is None or r in only) and live >> n & 1:
                self.out.emit(store_frame(self.local_off(n), r))

    def reload_regs(self, height: int, only: frozenset[Reg] | None = None) -> None:
        for i in range(min(height, len(self.regs))):
            r = self.regs[i]
            if only is None or r in only:
                self.out.emit(load_frame(r, self.spill_off(i)))
        # a dead local is not loaded, but its register is set (to 0): code that saves a register for a while
        # (``emit.borrow``) may pick it, and the verifier refuses to read one never written
        live = self.live()
        for n, r in self.local_regs.items():
            if only is None or r in only:
                self.out.emit(load_frame(r, self.local_off(n)) if live >> n & 1 else mov(r, 0))
