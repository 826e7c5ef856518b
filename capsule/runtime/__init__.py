"""capsule.runtime: the host side of compiled modules (instantiate, call, continue, traps)."""

from .errors import CallError, GuestExit, GuestRejected, GuestTrap, Pending
from .instance import Instance, RunStats

__all__ = ["CallError", "GuestExit", "GuestRejected", "GuestTrap", "Instance", "Pending", "RunStats"]
