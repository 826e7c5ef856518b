"""Code compaction: the same value in fewer or shorter instructions.

- ``rX <<= 32; rX >>= 32`` (zero-extending the low half) becomes ``wX = wX``, and ``rX = rY; rX <<= 32;
  rX >>= 32`` becomes ``wX = wY``;
- ``rX <<= 32; rX s>>= 32`` (sign-extending it) becomes ``rX = (s32)rX`` (movsx: cpu v4, Linux 6.6+);
- a narrow load followed by its sign extension (``rX = *(u32 *)(rY + off); rX = (s32)rX``, or the
  ``<<= 32; s>>= 32`` pair) becomes one sign-extending load ``rX = *(s32 *)(rY + off)`` (ldsx, cpu v4), where
  the verifier accepts ldsx: map values, the stack, packets and arenas (not the context, whose fields are
  rewritten by the kernel, nor kernel objects reached through BTF);
- a plain ``ld_imm64`` (two slots) whose value fits a sign-extended 32-bit immediate becomes ``mov``, one that
  fits 32 unsigned bits becomes ``mov32`` (which zero-extends).
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import BYTES_SIZE, LD_IMM64, SIZE_MASK, Alu, Class, Mode, Pseudo, Src
from capsule.ints import fits_signed, fits_unsigned, signed, unsigned

from ..analysis import Analysis
from ..values import Kind, access_val
from .base import Edits, Pass

_LSH = Class.ALU64 | Alu.LSH | Src.K
_RSH = Class.ALU64 | Alu.RSH | Src.K
_ARSH = Class.ALU64 | Alu.ARSH | Src.K
_MOV64_X = Class.ALU64 | Alu.MOV | Src.X
_LD_NARROW = {Class.LDX | Mode.MEM | BYTES_SIZE[n]: n for n in (1, 2, 4)}
_LDSX_OK = (Kind.MAP_VALUE, Kind.STACK, Kind.PKT, Kind.ARENA)


class Compact(Pass):
    name = "compact"
    summary = "lsh/rsh 32 pairs to mov32/movsx, load+sign extension to ldsx, ld_imm64 of small values to mov"

    def __init__(self, movsx: bool = True) -> None:
        self.movsx = movsx  # cpu v4 instructions (movsx, ldsx) allowed

    def find(self, a: Analysis, e: Edits) -> None:
        insns = a.code.insns
        before = a.values.before
        starts = a.block_starts
        n = len(insns)
        for i, ins in enumerate(insns):
            c = ins.code
            if c == LD_IMM64:
                if ins.src == Pseudo.NONE and ins.ref is None and before[i] is not None and e.free(i):
                    self._ld_imm64(e, i, ins)
                continue
            if i + 1 >= n or (i + 1) in starts or before[i] is None:
                continue
            nxt = insns[i + 1]
            if c in _LD_NARROW and self.movsx:
                self._ldsx(a, e, i, ins, _LD_NARROW[c])
            elif c == _LSH and ins.imm == 32 and not ins.off and nxt.dst == ins.dst and not nxt.off and \
                    nxt.imm == 32 and e.free(i, i + 1):
                if nxt.code == _RSH:
                    src = ins.dst
                    if i > 0 and i not in starts and e.free(i - 1):
                        prev = insns[i - 1]
                        if prev.code == _MOV64_X and prev.off == 0 and prev.dst == ins.dst:
                            src = prev.src
                            e.delete.add(i - 1)
                    e.replace[i] = Insn(Class.ALU | Alu.MOV | Src.X, ins.dst, src, sym=ins.sym)
                    e.delete.add(i + 1)
                    e.rewrites += 1
                elif nxt.code == _ARSH and self.movsx:
                    e.replace[i] = Insn(_MOV64_X, ins.dst, ins.dst, 32, sym=ins.sym)
                    e.delete.add(i + 1)
                    e.rewrites += 1

    @staticmethod
    def _ld_imm64(e: Edits, i: int, ins: Insn) -> None:
        v = unsigned(ins.imm)
        s = signed(v)
        if fits_signed(s, 32):
            e.replace[i] = Insn(Class.ALU64 | Alu.MOV | Src.K, ins.dst, 0, 0, s, sym=ins.sym)
        elif fits_unsigned(v, 32):
            e.replace[i] = Insn(Class.ALU | Alu.MOV | Src.K, ins.dst, 0, 0, signed(v, 32), sym=ins.sym)
        else:
            return
        e.rewrites += 1

    @staticmethod
    def _ldsx(a: Analysis, e: Edits, i: int, ld: Insn, size: int) -> None:
        insns = a.code.insns
        x = ld.dst
        if ld.src == x:
            pass  # the base is overwritten by the load either way
        nxt = insns[i + 1]
        bits = 8 * size
        drop: tuple[int, ...]
        if nxt.code == _MOV64_X and nxt.off == bits and nxt.dst == x and nxt.src == x:
            drop = (i + 1,)
        elif nxt.code == _LSH and nxt.dst == x and nxt.imm == 64 - bits and not nxt.off and i + 2 < len(insns) \
                and (i + 2) not in a.block_starts:
            third = insns[i + 2]
            if third.code != _ARSH or third.dst != x or third.imm != 64 - bits or third.off:
                return
            drop = (i + 1, i + 2)
        else:
            return
        if access_val(a.values, i, ld.src, ld.off).kind not in _LDSX_OK or not e.free(i, *drop):
            return
        e.replace[i] = Insn(Class.LDX | Mode.MEMSX | (ld.code & SIZE_MASK), x, ld.src, ld.off, sym=ld.sym)
        e.delete.update(drop)
        e.rewrites += 1
