"""capsule.runtime: the host side of compiled modules (instantiate, call, continue, traps)."""

from .errors import CallError, GuestRejected, GuestTrap, Pending
from .instance import Instance, RunStats

__all__ = ["CallError", "GuestRejected", "GuestTrap", "Instance", "Pending", "RunStats"]
