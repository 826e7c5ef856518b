"""Known bits of a 64-bit value (the kernel verifier's ``tnum``): ``value`` holds the known bits, ``mask`` the
unknown ones. A constant has ``mask == 0``. Only the operations the optimizer needs, each exact or
conservative (unknown bits are never claimed known)."""

from __future__ import annotations

from dataclasses import dataclass

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1


@dataclass(frozen=True)
class Tnum:
    value: int
    mask: int

    @staticmethod
    def const(v: int) -> Tnum:
        return Tnum(v & M64, 0)

    @staticmethod
    def unknown() -> Tnum:
        return Tnum(0, M64)

    @staticmethod
    def range_bits(bits: int) -> Tnum:
        """Any value below ``2**bits`` (a zero-extended narrow load)."""
        return Tnum(0, (1 << bits) - 1)

    @property
    def is_const(self) -> bool:
        return self.mask == 0

    def known_zero(self, bits: int) -> bool:
        """Whether every bit in the mask ``bits`` is known to be 0."""
        return not ((self.value | self.mask) & bits)

    def trailing_zeros(self) -> int:
        """How many low bits are known to be zero (alignment of an offset)."""
        v = self.value | self.mask
        if v == 0:
            return 64
        return (v & -v).bit_length() - 1

    def join(self, o: Tnum) -> Tnum:
        mask = self.mask | o.mask | (self.value ^ o.value)
        return Tnum(self.value & ~mask & M64, mask)

    def add(self, o: Tnum) -> Tnum:
        sm = (self.mask + o.mask) & M64
        sv = (self.value + o.value) & M64
        sigma = (sm + sv) & M64
        chi = sigma ^ sv
        mu = chi | self.mask | o.mask
        return Tnum(sv & ~mu & M64, mu & M64)

    def sub(self, o: Tnum) -> Tnum:
        dv = (self.value - o.value) & M64
        alpha = (dv + self.mask) & M64
        beta = (dv - o.mask) & M64
        chi = alpha ^ beta
        mu = chi | self.mask | o.mask
        return Tnum(dv & ~mu & M64, mu & M64)

    def and_(self, o: Tnum) -> Tnum:
        alpha = self.value | self.mask
        beta = o.value | o.mask
        v = self.value & o.value
        return Tnum(v, alpha & beta & ~v)

    def or_(self, o: Tnum) -> Tnum:
        v = self.value | o.value
        mu = self.mask | o.mask
        return Tnum(v, mu & ~v)

    def xor(self, o: Tnum) -> Tnum:
        v = self.value ^ o.value
        mu = self.mask | o.mask
        return Tnum(v & ~mu, mu)

    def lsh(self, k: int) -> Tnum:
        return Tnum((self.value << k) & M64, (self.mask << k) & M64)

    def rsh(self, k: int) -> Tnum:
        return Tnum(self.value >> k, self.mask >> k)

    def trunc32(self) -> Tnum:
        return Tnum(self.value & M32, self.mask & M32)
