"""The exact figures of a compiled object once the kernel has loaded it: instructions as built, instructions the
verifier processed, and what the JIT made of them, per BPF program of the object.

These are the numbers that do not move with the machine's load, so they are what the benchmark baselines record
(``tests/bench/baselines.json``) and what ``capsule bench programs`` prints beside its timings. The processed
count is the kernel's own ``verified_insns`` from ``bpf_prog_info``: no verifier log is needed to read it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from capsule.bpf.spec import ObjectSpec
from capsule.compiler import abi
from capsule.runtime import Instance


@dataclass
class ProgramFigures:
    """One BPF program of a compiled object."""

    name: str
    bpf_insns: int  # instructions as capsule built them (the object's code section)
    processed: int  # instructions the verifier processed to accept it (at most 1M)
    xlated_insns: int  # instructions after the kernel's rewrites (``xlated_prog_len / 8``)
    jited_bytes: int  # x86-64 code the JIT emitted


@dataclass
class ObjectFigures:
    """Every program of one loaded object, and how long loading it took."""

    programs: list[ProgramFigures] = field(default_factory=list)
    load_s: float = 0.0

    @property
    def bpf_insns(self) -> int:
        return sum(p.bpf_insns for p in self.programs)

    @property
    def processed(self) -> int:
        return sum(p.processed for p in self.programs)

    @property
    def max_processed(self) -> int:
        """The largest per-program count: what the kernel's 1M limit applies to."""
        return max((p.processed for p in self.programs), default=0)

    @property
    def jited_bytes(self) -> int:
        return sum(p.jited_bytes for p in self.programs)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(bpf_insns=self.bpf_insns, processed=self.processed, jited_bytes=self.jited_bytes)
        return d


def object_figures(spec: ObjectSpec, inst: Instance) -> ObjectFigures:
    """The figures of ``spec`` as ``inst`` (its loaded instance) holds it, program by program in entry order."""
    figures = ObjectFigures(load_s=inst.load_seconds)
    for k, prog in enumerate(inst.programs):
        name = abi.program_name(k)
        info = prog.info()
        figures.programs.append(ProgramFigures(name, len(spec.programs[name].insns), info.verified_insns,
                                               info.xlated_prog_len // 8, info.jited_prog_len))
    return figures
