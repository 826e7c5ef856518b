"""Checked mode's bounds check (``memory._check``: ``address > limit - end``, signed) at its edges: the last
byte of memory is reachable and the next traps, for every access size, with offsets up to 4 GiB - 1, with the
address in a local's register or in a temporary, and in a memory of 0 pages, where ``limit - end`` is
negative and every access must trap."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsule.compiler import Options, compile_module
from capsule.runtime import GuestTrap, Instance
from capsule.wasm import load

from .test_regressions_spec import wat

pytestmark = pytest.mark.requires_bpf

PAGE = 65536
LOADS = "".join(
    f'  (func (export "ld{w}{o}") (param i32) (result i64) (i64.load{w} offset={o} (local.get 0)))\n'
    f'  (func (export "st{w}{o}") (param i32) (i64.store{w[:-2] if w else ""} offset={o} (local.get 0) '
    f"(i64.const -1)))\n"
    for w in ("8_u", "16_u", "32_u", "") for o in (0, 5, 4294967295))
# the address computed on the operand stack (a temporary, not a local's register)
SUMS = """  (func (export "sum") (param i32 i32) (result i32) (i32.load (i32.add (local.get 0) (local.get 1))))
  (func (export "sumst") (param i32 i32) (i32.store (i32.add (local.get 0) (local.get 1)) (i32.const 7)))
"""


def module(pages: int) -> str:
    return f"(module (memory {pages})\n{LOADS}{SUMS})"


def width(name: str) -> int:
    return {"8_u": 1, "16_u": 2, "32_u": 4, "": 8}[name]


@pytest.fixture(scope="module")
def one_page(tmp_path_factory: pytest.TempPathFactory) -> Instance:
    text = module(1)
    with Instance(compile_module(load(wat(tmp_path_factory.mktemp("b"), text)), Options(checked=True))) as inst:
        yield inst


@pytest.mark.parametrize("w", ["8_u", "16_u", "32_u", ""])
def test_last_byte_reachable_next_traps(one_page: Instance, w: str) -> None:
    n = width(w)
    for o in (0, 5):
        last = PAGE - n - o  # the highest address whose access ends at the limit
        one_page.call(f"st{w}{o}", last)
        assert one_page.call(f"ld{w}{o}", last) == [(1 << 8 * n) - 1 if n < 8 else -1]
        for bad in (last + 1, PAGE, 0xFFFF_FFFF):
            with pytest.raises(GuestTrap, match="out of bounds"):
                one_page.call(f"ld{w}{o}", bad)
            with pytest.raises(GuestTrap, match="out of bounds"):
                one_page.call(f"st{w}{o}", bad)
    for a in (0, 1, PAGE):  # offset 4 GiB - 1: past any 32-bit memory
        with pytest.raises(GuestTrap, match="out of bounds"):
            one_page.call(f"ld{w}4294967295", a)


def test_address_in_a_temporary(one_page: Instance) -> None:
    one_page.call("sumst", PAGE - 8, 4)
    assert one_page.call("sum", PAGE - 5, 1) == [7]
    for a, b in ((PAGE - 4, 1), (PAGE, 0), (0xFFFF_FFFF, 0xFFFF_FFFF)):
        with pytest.raises(GuestTrap, match="out of bounds"):
            one_page.call("sum", a, b)
        with pytest.raises(GuestTrap, match="out of bounds"):
            one_page.call("sumst", a, b)


def test_empty_memory_traps_everywhere(tmp_path: Path) -> None:
    # limit 0: limit - end < 0, which an unsigned comparison would read as 2^64 - end and let through
    with Instance(compile_module(load(wat(tmp_path, module(0))), Options(checked=True))) as inst:
        for w in ("8_u", ""):
            for a in (0, 1, 0x7FFF_FFFF, 0xFFFF_FFFF):
                with pytest.raises(GuestTrap, match="out of bounds"):
                    inst.call(f"ld{w}0", a)
                with pytest.raises(GuestTrap, match="out of bounds"):
                    inst.call(f"st{w}5", a)
