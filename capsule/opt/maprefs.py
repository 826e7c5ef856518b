"""Keeping every map a program uses: dead-code removal must not drop the last reference to a map.

The kernel derives a program's maps (``used_maps``) from its ``ld_imm64`` map references. A reference whose
value is dead is still meaningful: it binds the program to an arena (``addr_space_cast`` and arena pointers are
refused in a program without one; capsule's own dispatcher loads the arena map only for this), and it keeps a
map alive for as long as the program. So when a pass removes the last reference to a map, a dead
``r0 = map`` is put back at the program's entry, where r0 holds nothing yet, in the form the lost reference
had: a map pointer (``MAP_FD``), or for global data (``.data``, ``.rodata.config``, ...) the address of its
value (``MAP_VALUE``), the only form an ELF object can express for a data section.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import LD_IMM64, Pseudo

from .rewrite import Code

__all__ = ["map_refs", "keep_map_refs"]

_MAP_KINDS = frozenset((Pseudo.MAP_FD, Pseudo.MAP_VALUE, Pseudo.MAP_IDX, Pseudo.MAP_IDX_VALUE))
_VALUE_KINDS = frozenset((Pseudo.MAP_VALUE, Pseudo.MAP_IDX_VALUE))


def map_refs(insns: list[Insn]) -> set[str]:
    """Names of the maps referenced by ``insns``."""
    return {ins.ref for ins in insns if ins.code == LD_IMM64 and ins.src in _MAP_KINDS and ins.ref}


def _ref_forms(insns: list[Insn]) -> dict[str, int]:
    """Map name -> the pseudo source of its first reference (value forms collapse to ``MAP_VALUE``)."""
    out: dict[str, int] = {}
    for ins in insns:
        if ins.code == LD_IMM64 and ins.src in _MAP_KINDS and ins.ref and ins.ref not in out:
            out[ins.ref] = Pseudo.MAP_VALUE if ins.src in _VALUE_KINDS else Pseudo.MAP_FD
    return out


def keep_map_refs(before: Code, after: Code) -> Code:
    """``after``, with a dead ``r0 = map`` at its entry for each map ``before`` referenced and it does not."""
    lost = map_refs(before.insns) - map_refs(after.insns)
    if not lost:
        return after
    forms = _ref_forms(before.insns)
    pre = [Insn(LD_IMM64, 0, forms[name], 0, 0, ref=name) for name in sorted(lost)]
    k = len(pre)
    entry_tid = after.funcs.get(0, 0)
    funcs = {0: entry_tid} | {s + k: tid for s, tid in after.funcs.items() if s}
    # the entry's line record stays at instruction 0 (the kernel wants the first record there)
    lines = [(i + k if i else 0, li) for i, li in after.lines]
    targets = {i + k: t + k for i, t in after.targets.items()}
    return Code(pre + list(after.insns), targets, funcs, lines)
