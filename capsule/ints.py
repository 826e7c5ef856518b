"""Integers as BPF and wasm hold them: two's-complement views of raw bit patterns, in one place."""
from __future__ import annotations

MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1
def signed(v: int, bits: int) -> int:
    """The two's-complement value of the low ``bits`` bits of ``v``."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v
def unsigned(v: int, bits: int) -> int:
    """The low ``bits`` bits of ``v`` as a non-negative number."""
    return v & ((1 << bits) - 1)
def fits_signed(v: int, bits: int) -> bool:
    """Whether ``v`` is representable as a signed ``bits``-bit integer."""
    return -(1 << (bits - 1)) <= v < (1 << (bits - 1))
