"""capsule.ints: the one home of sign extension and width masks."""

import pytest

from capsule.ints import MASK8, MASK16, MASK32, MASK64, fits_signed, fits_unsigned, mask, signed, unsigned


@pytest.mark.parametrize(
    ("v", "bits", "want"),
    [
        (0, 32, 0),
        (0x7FFFFFFF, 32, 0x7FFFFFFF),
        (0x80000000, 32, -(1 << 31)),
        (0xFFFFFFFF, 32, -1),
        (-1, 32, -1),  # either representation of the pattern
        (0x1_0000_0005, 32, 5),  # only the low bits count
        (0x8000, 16, -0x8000),
        (0x7F, 8, 0x7F),
        (0x80, 8, -0x80),
        ((1 << 64) - 1, 64, -1),
        (1 << 63, 64, -(1 << 63)),
        ((1 << 63) - 1, 64, (1 << 63) - 1),
    ],
)
def test_signed(v: int, bits: int, want: int) -> None:
    assert signed(v, bits) == want


def test_signed_defaults_to_64_bits() -> None:
    assert signed(MASK64) == -1
    assert unsigned(-1) == MASK64


def test_unsigned_is_the_inverse_of_signed() -> None:
    for bits in (8, 16, 32, 64):
        for v in (0, 1, -1, 1 << (bits - 1), -(1 << (bits - 1)), (1 << (bits - 1)) - 1):
            assert signed(unsigned(v, bits), bits) == signed(v, bits)
            assert unsigned(signed(v, bits), bits) == unsigned(v, bits)
    assert unsigned(-2, 32) == 0xFFFFFFFE


def test_fits() -> None:
    assert fits_signed(-(1 << 31), 32) and fits_signed((1 << 31) - 1, 32)
    assert not fits_signed(1 << 31, 32) and not fits_signed(-(1 << 31) - 1, 32)
    assert fits_unsigned(0, 16) and fits_unsigned(MASK16, 16)
    assert not fits_unsigned(-1, 16) and not fits_unsigned(1 << 16, 16)


def test_masks() -> None:
    assert (MASK8, MASK16, MASK32, MASK64) == (mask(8), mask(16), mask(32), mask(64))
    assert MASK32 == 0xFFFFFFFF
