"""Build options: the choices a user makes when compiling a module (``capsule build --checked`` etc.)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from . import abi
from .hook_abi import HOOK_KINDS


@dataclass(frozen=True)
class Options:
    #: bounds-check every memory access and trap as the wasm spec says (else: the arena's behaviour)
    checked: bool = True
    #: loops stay inside their region behind may_goto; without it every back-edge returns to the dispatcher
    may_goto: bool = True
    #: fibers and the size of each one's software stack (a power of two, at most 64 MiB)
    fibers: int = 4
    stack_size: int = 16 << 20
    #: target size of a physical BPF function, in instructions
    phys_target: int = 6000
    #: replace calls to small call-free functions by their bodies (``inline``)
    inline: bool = True
    #: estimated instructions one BPF program may hold before the object is split into several joined by tail
    #: calls (each program gets its own verifier budget of 1M processed instructions, about 2 per instruction)
    program_budget: int = 350_000
    #: also build a hook entry program (``capsule.compiler.hooks``) that runs the guest's packet handler on
    #: every packet: "xdp" or "tc" (None: only the run entry); loop back-edges then charge the per-packet budget
    hook: str | None = None
    #: the window: "arena" (BPF_MAP_TYPE_ARENA), or "map" (mmapable array pieces, for kernels without arena)
    window: str = "arena"
    #: the map window's linear-memory piece in bytes (a power of two, at most 128 MiB); 0: the memory's
    #: maximum, at most 64 MiB
    window_piece: int = 0
    #: the highest BPF instruction set the code may use: 4 (sign-extending moves and loads, signed division),
    #: or 3 for kernels before 6.6, which get the v3 sequences for them
    cpu: int = 4

    def __post_init__(self) -> None:
        if self.stack_size & (self.stack_size - 1) or not (1 << 16) <= self.stack_size <= 64 << 20:
            raise ValueError("stack_size must be a power of two between 64 KiB and 64 MiB")
        room = abi.GIB4 - abi.STACKS
        if not 1 <= self.fibers <= abi.MAX_FIBERS or self.fibers * self.stack_size > room:
            raise ValueError(f"{self.fibers} fibers of {self.stack_size >> 20} MiB do not fit the window "
                             f"({room >> 20} MiB for stacks)")
        if self.hook not in (None, *HOOK_KINDS):
            raise ValueError(f"no hook {self.hook!r} (there are: {', '.join(HOOK_KINDS)})")
        if self.hook is not None and not self.may_goto:
            raise ValueError("a hook program needs may_goto (its per-packet budget is charged behind it)")
        if self.hook is not None and self.fibers < 2:
            raise ValueError("a hook program needs at least 2 fibers: one per CPU and one for the host")

        if self.cpu not in (3, 4):
            raise ValueError(f"cpu must be 3 or 4, not {self.cpu}")
        if self.window not in ("arena", "map"):
            raise ValueError(f"window must be 'arena' or 'map', not {self.window!r}")
        if self.window_piece and (self.window_piece & (self.window_piece - 1) or self.window_piece < abi.WASM_PAGE):
            raise ValueError("window_piece must be a power of two of at least 64 KiB")

    def replace(self, **kw: Any) -> Options:
        return replace(self, **kw)
