"""A buffer of BPF instructions with named labels, for code that is assembled in pieces.

Each wasm function is lowered into its own ``Code``; physical functions are concatenations of those, and
labels are resolved once per physical function (``capsule.bpf.asm.resolve``). Region ids are not known while a
function is lowered (they depend on how functions are packed), so instructions that carry one are recorded in
``region_fixups`` and patched afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.asm import resolve
from capsule.bpf.insn import Insn


@dataclass(frozen=True)
class RegionKey:
    """A region before it has an id: the ``index``-th entry point of wasm function ``func``."""

    func: int
    index: int

    @property
    def label(self) -> str:
        """The label of the region's first instruction."""
        return f"r{self.func}.{self.index}"


@dataclass
class Code:
    insns: list[Insn] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    # (instruction, region, field): the region's id goes into insn.imm, added to what is there
    region_fixups: list[tuple[Insn, RegionKey]] = field(default_factory=list)
    _n: int = 0
    _labelled: int = -1  # where the last label was defined

    def emit(self, *insns: Insn) -> None:
        self.insns.extend(insns)

    def label(self, name: str) -> None:
        if name in self.labels:
            raise ValueError(f"label {name!r} defined twice")
        self.labels[name] = len(self.insns)
        self._labelled = len(self.insns)

    def just_emitted(self, insn: Insn) -> bool:
        """Whether ``insn`` is the last instruction and nothing can jump in after it (no label since)."""
        return bool(self.insns) and self.insns[-1] is insn and self._labelled != len(self.insns)

    def fresh(self, stem: str) -> str:
        self._n += 1
        return f"{stem}.{self._n}"

    def region_ref(self, insn: Insn, key: RegionKey) -> Insn:
        self.region_fixups.append((insn, key))
        return insn

    def append(self, other: Code) -> None:
        base = len(self.insns)
        for name, idx in other.labels.items():
            if name in self.labels:
                raise ValueError(f"label {name!r} defined twice")
            self.labels[name] = base + idx
        self.insns.extend(other.insns)
        self.region_fixups.extend(other.region_fixups)

    def delete(self, label: str, count: int) -> None:
        """Remove the ``count`` instructions at ``label`` (and the label): code found unreachable once every
        function is lowered, which the verifier would refuse."""
        at = self.labels.pop(label)
        for name in [n for n, i in self.labels.items() if at < i < at + count]:  # labels inside go too
            del self.labels[name]
        del self.insns[at : at + count]
        for name, i in self.labels.items():
            if i >= at + count:
                self.labels[name] = i - count

    def __len__(self) -> int:
        return len(self.insns)

    def slots(self) -> int:
        return sum(i.slots() for i in self.insns)

    def assemble(self, region_ids: dict[RegionKey, int]) -> list[Insn]:
        for insn, key in self.region_fixups:
            insn.imm = region_ids[key]
        return resolve(self.insns, self.labels)
