"""Making a failing input small: byte-wise delta debugging.

``reduce`` removes ever smaller chunks of the input (halves, quarters, ... single bytes) and keeps each removal
after which ``fails`` still says the input fails the same way; it stops when no single byte can go, or when its
budget of attempts or seconds is spent (a reduced input is a help, not a proof of minimality).
"""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_ATTEMPTS = 2000
MAX_SECONDS = 60.0


def reduce(data: bytes, fails: Callable[[bytes], bool], *, attempts: int = MAX_ATTEMPTS,
           seconds: float = MAX_SECONDS) -> bytes:
    deadline = time.monotonic() + seconds
    tries = 0
    chunk = max(1, len(data) // 2)
    while data and tries < attempts and time.monotonic() < deadline:
        removed = False
        at = 0
        while at < len(data) and tries < attempts and time.monotonic() < deadline:
            candidate = data[:at] + data[at + chunk :]
            tries += 1
            if fails(candidate):
                data, removed = candidate, True
            else:
                at += chunk
        if chunk == 1 and not removed:
            break
        chunk = max(1, chunk // 2) if not removed or chunk > 1 else 1
    return data
