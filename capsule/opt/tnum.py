"""Known bits of a 64-bit value (the kernel verifier's ``tnum``): ``value`` holds the known bits, ``mask`` the
unknown ones. A constant has ``mask == 0``. Only the operations the optimizer needs, each exact or
conservative (unknown bits are never claimed known).

A ``Tnum`` is a named tuple: the value analysis creates and compares millions of them, and tuples are what
CPython builds and compares fastest (equality and hashing run in C).
"""

from __future__ import annotations

from typing import NamedTuple

from capsule.ints import MASK32, MASK64

_new = tuple.__new__


class Tnum(NamedTuple):
    value: int
    mask: int

    @staticmethod
    def const(v: int) -> Tnum:
        return _new(Tnum, (v & MASK64, 0))

    @staticmethod
    def unknown() -> Tnum:
        return UNKNOWN

    @staticmethod
    def range_bits(bits: int) -> Tnum:
        """Any value below ``2**bits`` (a zero-extended narrow load)."""
        return _new(Tnum, (0, (1 << bits) - 1))

    @property
    def is_const(self) -> bool:
        return self[1] == 0

    def known_zero(self, bits: int) -> bool:
        """Whether every bit in the mask ``bits`` is known to be 0."""
        return not ((self[0] | self[1]) & bits)

    def trailing_zeros(self) -> int:
        """How many low bits are known to be zero (alignment of an offset)."""
        v = self[0] | self[1]
        if v == 0:
            return 64
        return (v & -v).bit_length() - 1

    def join(self, o: Tnum) -> Tnum:
        if self == o:
            return self
        mask = self[1] | o[1] | (self[0] ^ o[0])
        return _new(Tnum, (self[0] & ~mask & MASK64, mask))

    def add(self, o: Tnum) -> Tnum:
        a, am = self
        b, bm = o
        if not (am | bm):
            return _new(Tnum, ((a + b) & MASK64, 0))
        sm = (am + bm) & MASK64
        sv = (a + b) & MASK64
        chi = ((sm + sv) & MASK64) ^ sv
        mu = chi | am | bm
        return _new(Tnum, (sv & ~mu & MASK64, mu & MASK64))

    def sub(self, o: Tnum) -> Tnum:
        a, am = self
        b, bm = o
        dv = (a - b) & MASK64
        if not (am | bm):
            return _new(Tnum, (dv, 0))
        chi = ((dv + am) & MASK64) ^ ((dv - bm) & MASK64)
        mu = chi | am | bm
        return _new(Tnum, (dv & ~mu & MASK64, mu & MASK64))

    def and_(self, o: Tnum) -> Tnum:
        alpha = self[0] | self[1]
        beta = o[0] | o[1]
        v = self[0] & o[0]
        return _new(Tnum, (v, alpha & beta & ~v))

    def or_(self, o: Tnum) -> Tnum:
        v = self[0] | o[0]
        mu = self[1] | o[1]
        return _new(Tnum, (v, mu & ~v))

    def xor(self, o: Tnum) -> Tnum:
        v = self[0] ^ o[0]
        mu = self[1] | o[1]
        return _new(Tnum, (v & ~mu, mu))

    def lsh(self, k: int) -> Tnum:
        return _new(Tnum, ((self[0] << k) & MASK64, (self[1] << k) & MASK64))

    def rsh(self, k: int) -> Tnum:
        return _new(Tnum, (self[0] >> k, self[1] >> k))

    def trunc32(self) -> Tnum:
        return _new(Tnum, (self[0] & MASK32, self[1] & MASK32))


UNKNOWN = Tnum(0, MASK64)
