"""A buffer of BPF instructions with named labels, for code that is assembled in pieces.

Each wasm function is lowered into its own ``Code``; physical functions are concatenations of those, and
labels are resolved once per physical function (``capsule.bpf.asm.resolve``). Region ids are not known while a
function is lowered (they depend on how functions are packed), so instructions that carry one are recorded in
``region_fixups`` and patched afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsule.bpf.asm import Reg, alu, resolve_mapped
from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Class, Mode


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

    def retract(self, insn: Insn) -> None:
        """Take back the last instruction, ``insn`` (``just_emitted``: no label points past it)."""
        assert self.just_emitted(insn)
        self.insns.pop()

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

    def widen_offsets(self, base: Reg) -> None:
        """Loads and stores at ``base`` whose offset does not fit 16 bits (a frame with thousands of locals or a
        deep operand stack) become ``base += high; access at low; base -= high``: arena pointer arithmetic, so
        no register but the base is touched. Labels keep pointing at the first instruction of each."""
        if not any(_far_access(i, base) for i in self.insns):
            return
        out: list[Insn] = []
        where: list[int] = []
        for ins in self.insns:
            where.append(len(out))
            if _far_access(ins, base):
                low = ((ins.off + (1 << 15)) % (1 << 16)) - (1 << 15)
                high = ins.off - low
                ins.off = low  # the same object: a region fixup may point at it
                out += [alu(Alu.ADD, base, high), ins, alu(Alu.SUB, base, high)]
            else:
                out.append(ins)
        where.append(len(out))
        self.insns = out
        self.labels = {name: where[i] for name, i in self.labels.items()}

    def __len__(self) -> int:
        return len(self.insns)

    def slots(self) -> int:
        return sum(i.slots() for i in self.insns)

    def assemble(self, region_ids: dict[RegionKey, int]) -> list[Insn]:
        """The resolved instructions (a far conditional jump becomes two or three); ``position`` then maps an
        instruction index of this code to its index among them."""
        for insn, key in self.region_fixups:
            insn.imm = region_ids[key]
        out, self._where = resolve_mapped(self.insns, self.labels)
        return out

    def position(self, index: int) -> int:
        return self._where[index]


def _far_access(ins: Insn, base: Reg) -> bool:
    """A load or store addressed from ``base`` with an offset beyond 16 bits."""
    cls = ins.code & 0x07
    if ins.code & 0xE0 != Mode.MEM:
        return False
    if cls == Class.LDX:
        reg = ins.src
    elif cls in (Class.ST, Class.STX):
        reg = ins.dst
    else:
        return False
    return reg == base and not -(1 << 15) <= ins.off < (1 << 15)
