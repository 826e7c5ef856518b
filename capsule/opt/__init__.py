"""capsule.opt: verifier-aware optimisation of BPF bytecode, each rewrite proven in the kernel.

Data flows one way: ``rewrite.Code`` (index-based, editable instructions) -> analyses (``cfg``, ``liveness``,
``reaching``, ``values``) -> ``passes`` (the six Merlin optimisations, then four the corpus asked for) ->
``pipeline`` (passes one at a time, each candidate handed to ``check.Checker``, which loads and runs it next to
the original) -> ``ObjectSpec`` for ``capsule.bpf.elf_write``.

Speed (target: under 0.05 s per thousand instructions): an ``Analysis`` is computed lazily and memoised for
the ``Code`` it describes (``Analysis.of``), so passes looking at unchanged code share it and the pipeline pays
per version of the code, not per pass; value and liveness results of functions and blocks an edit left alone
are reused from the previous version; a pass is not run again on code it already found nothing in; values,
known bits and states are tuples; data flows run on worklists in (reverse) post-order; the pattern passes ask
block-local def-use questions (``local``) instead of building global def-use chains; dead-code removal finds
whole dead chains at once (``liveness.faint``). The checker refuses a candidate that would make the verifier
process more instructions, so NPI never goes up.
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
