"""What a call into a compiled module can end with besides results."""

from __future__ import annotations

from dataclasses import dataclass


class CallError(Exception):
    """The call could not be made as asked (no such export, wrong argument count, busy fiber, bad token)."""


class GuestTrap(Exception):
    """The guest trapped (a wasm trap: unreachable, division by zero, out of bounds, ...).

    ``message`` is the wasm spec's wording, ``backtrace`` the guest functions from the trapping one outwards.
    """

    def __init__(self, message: str, backtrace: list[str], code: int | None = None) -> None:
        self.message = message
        self.backtrace = backtrace
        self.code = code
        where = "".join(f"\n  in {name}" for name in backtrace)
        super().__init__(f"guest trap: {message}{where}")


@dataclass(frozen=True)
class Pending:
    """The call used up its budget; ``Instance.resume(token)`` continues it."""

    token: int
