"""What a pass is: it looks at an analysed ``Code``, records non-overlapping edits, and the driver applies them
and runs it again until it finds nothing more (every round works on fresh analyses, so no pass ever reasons
about code it has already changed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.insn import Insn

from ..analysis import Analysis
from ..rewrite import Code

__all__ = ["Edits", "Pass", "MAX_ROUNDS"]

MAX_ROUNDS = 16


@dataclass
class Edits:
    delete: set[int] = field(default_factory=set)
    replace: dict[int, Insn] = field(default_factory=dict)
    retarget: dict[int, int] = field(default_factory=dict)
    rewrites: int = 0  # how many pattern rewrites were recorded

    def free(self, *idx: int) -> bool:
        """Whether none of ``idx`` is already edited this round."""
        return self.delete.isdisjoint(idx) and self.replace.keys().isdisjoint(idx)

    def __bool__(self) -> bool:
        return bool(self.delete or self.replace)


class Pass:
    """A rewrite over one program. Subclasses set ``name``/``summary`` and implement ``find``."""

    name = ""
    summary = ""

    def find(self, a: Analysis, e: Edits) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    # set by ``run``: the code its last round found nothing in. The pipeline skips the pass while the program
    # is still that code (passes are deterministic: it would find nothing again). It names the returned code
    # only when ``run`` stopped there, so a ``run`` of a subclass that changes the code after is never skipped.
    settled_on: Code | None = None

    def run(self, code: Code, prog_type: int) -> tuple[Code, int]:
        """Apply the pass until it finds nothing; returns the new code and the number of rewrites."""
        total = 0
        self.settled_on = None
        for _ in range(MAX_ROUNDS):
            e = Edits()
            self.find(Analysis.of(code, prog_type), e)
            if not e:
                self.settled_on = code
                break
            code = code.edit(e.delete, e.replace, e.retarget)
            total += max(e.rewrites, 1)
        return code, total
