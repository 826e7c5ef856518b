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


class GuestRejected(Exception):
    """The kernel's verifier refused the compiled program; names the guest function whose code it stopped in."""

    def __init__(self, function: str | None, error: Exception) -> None:
        self.function = function
        self.error = error
        reason = getattr(error, "reason", None) or str(error)
        where = f"guest function {function}" if function else "capsule's dispatcher code"
        idx = getattr(error, "insn_index", None)
        at = f" at BPF instruction {idx} ({getattr(error, 'insn_text', '')})" if idx is not None else ""
        super().__init__(f"the verifier rejected {where}{at}: {reason}")


class GuestExit(Exception):
    """The guest ended the call with ``capsule.exit(code)`` (a C program's ``exit``)."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"guest exited with status {code}")


@dataclass(frozen=True)
class Pending:
    """The call stopped before finishing; ``Instance.resume(token)`` continues it. ``yielded`` tells a
    ``capsule.yield`` (the guest wants the host: drain its output, give it input) from a used-up budget."""

    token: int
    yielded: bool = False
