"""Fixed-width two's-complement integers as Python ints: the one place sign extension is spelled out.

BPF registers, immediates and wasm values are fixed-width bit patterns; Python ints are unbounded. Every layer
converts between the two (an ``imm`` field is a signed 32-bit number, a register a 64-bit pattern, a wasm
``i32`` either), and each conversion is one of these functions. ``signed`` and ``unsigned`` take any int and
look only at its low ``bits`` bits, so they accept a value in either representation (``-1`` and
``0xFFFFFFFF`` are the same 32-bit pattern).

A leaf module: it imports nothing from capsule, so every layer may use it.
"""

from __future__ import annotations

__all__ = ["MASK8", "MASK16", "MASK32", "MASK64", "mask", "signed", "unsigned", "fits_signed", "fits_unsigned"]

MASK8 = (1 << 8) - 1
MASK16 = (1 << 16) - 1
MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1


def mask(bits: int) -> int:
    """The all-ones pattern of ``bits`` bits."""
    return (1 << bits) - 1


def unsigned(v: int, bits: int = 64) -> int:
    """The low ``bits`` bits of ``v`` read as an unsigned number (0 <= result < 2**bits)."""
    return v & ((1 << bits) - 1)


def signed(v: int, bits: int = 64) -> int:
    """The low ``bits`` bits of ``v`` read as a two's-complement number (-2**(bits-1) <= result < 2**(bits-1))."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def fits_signed(v: int, bits: int) -> bool:
    """Whether the number ``v`` is representable as a signed ``bits``-bit integer (no truncation: -1 fits, 2**31
    does not fit 32 bits)."""
    return -(1 << (bits - 1)) <= v < 1 << (bits - 1)


def fits_unsigned(v: int, bits: int) -> bool:
    """Whether the number ``v`` is representable as an unsigned ``bits``-bit integer."""
    return 0 <= v < 1 << bits
