"""capsule.opt: verifier-aware optimisation of BPF bytecode, each rewrite proven in the kernel.

Data flows one way: ``rewrite.Code`` (index-based, editable instructions) -> analyses (``cfg``, ``liveness``,
``reaching``, ``values``) -> ``passes`` (the six Merlin optimisations) -> ``pipeline`` (passes one at a time,
each candidate handed to ``check.Checker``, which loads and runs it next to the original) -> ``ObjectSpec``
for ``capsule.bpf.elf_write``.
"""

from .check import Checker, LoadStats
from .passes import DEFAULT_PASSES, PASSES, Pass
from .pipeline import (
           ObjectResult,
           PassRecord,
           ProgramResult,
           count_slots,
           make_passes,
           optimize_object,
           optimize_program,
)
from .rewrite import Code

__all__ = ["Checker", "Code", "DEFAULT_PASSES", "LoadStats", "ObjectResult", "PASSES", "Pass", "PassRecord",
           "ProgramResult", "count_slots", "make_passes", "optimize_object", "optimize_program"]
