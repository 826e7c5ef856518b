"""Reading the numbers the verifier prints at the end of its log.

With any log level the verifier ends with
``processed N insns (limit 1000000) max_states_per_insn M total_states T peak_states P mark_read R``
(newer kernels may drop or add ``key value`` pairs, so they are read generically), and with ``BPF_LOG_STATS``
(log_level bit 4) it adds ``verification time X usec`` and ``stack depth A+B+C`` (one figure per subprogram).
These figures are what the optimizer and the benchmarks compare, so they get a small typed record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PROCESSED = re.compile(r"^processed (\d+) insns \(limit (\d+)\)(.*)$")
_PAIR = re.compile(r"([a-z_]+) (\d+)")
_TIME = re.compile(r"^verification time (\d+) usec$")
_STACK = re.compile(r"^stack depth ([\d+]+)$")


@dataclass
class VerifierStats:
    """What one program load cost the verifier. Fields missing from the log stay None / empty."""

    processed_insns: int | None = None
    insn_limit: int | None = None
    max_states_per_insn: int | None = None
    total_states: int | None = None
    peak_states: int | None = None
    mark_read: int | None = None
    verification_time_usec: int | None = None
    stack_depths: list[int] = field(default_factory=list)  # per subprogram, main program first
    extra: dict[str, int] = field(default_factory=dict)  # other "key N" pairs of the processed line

    @property
    def stack_depth(self) -> int:
        """The main program's stack depth (0 when not logged)."""
        return self.stack_depths[0] if self.stack_depths else 0


_KNOWN = {"max_states_per_insn", "total_states", "peak_states", "mark_read"}


def parse_stats(log: str) -> VerifierStats:
    """Parse the stats lines of a verifier log (the last occurrence of each wins)."""
    st = VerifierStats()
    for raw in log.splitlines():
        line = raw.strip()
        m = _PROCESSED.match(line)
        if m:
            st.processed_insns, st.insn_limit = int(m.group(1)), int(m.group(2))
            for key, val in _PAIR.findall(m.group(3)):
                if key in _KNOWN:
                    setattr(st, key, int(val))
                else:
                    st.extra[key] = int(val)
            continue
        m = _TIME.match(line)
        if m:
            st.verification_time_usec = int(m.group(1))
            continue
        m = _STACK.match(line)
        if m:
            st.stack_depths = [int(x) for x in m.group(1).split("+") if x]
    return st
