"""Fast mode (no bounds checks): a wild access lands inside linear memory, masked (``abi.fast_mask``), and never
in the runtime area above it (fiber records, frames, tables), so the runtime keeps working whatever a buggy
guest writes; checked mode traps on the same access."""

from __future__ import annotations

import pytest

from capsule.compiler import Options, abi, compile_module
from capsule.runtime import GuestTrap, Instance
from capsule.wasm import load

from .diff_harness import build_source

pytestmark = pytest.mark.requires_bpf

SOURCE = r"""
void poke(unsigned addr, unsigned v) { *(volatile unsigned *)addr = v; }
unsigned peek(unsigned addr) { return *(volatile unsigned *)addr; }
int add(int a, int b) { return a + b; }
"""


@pytest.fixture(scope="module")
def wasm() -> bytes:
    return build_source(SOURCE, "fastmem", ["-Wl,--initial-memory=16777216", "-Wl,--max-memory=16777216"])


def test_wild_store_stays_in_linear_memory(wasm: bytes) -> None:
    with Instance(compile_module(load(wasm), Options(checked=False))) as inst:
        mask = abi.fast_mask(16 << 20)
        assert mask == (16 << 20) - 1
        fiber0 = abi.FIBERS + abi.FIBER_GENERATION  # a word the runtime relies on
        before = inst.u64(fiber0)
        for target in (fiber0, abi.STACKS + 8, abi.CTRL + abi.CTRL_MEM_BYTES, 0xFFFF_FFF0):
            inst.call("poke", target, 0x4142_4344)
            assert inst.call("peek", target & mask) == [0x4142_4344]
        assert inst.u64(fiber0) == before
        assert inst.memory_size == 16 << 20  # the control block is intact
        assert inst.call("add", 2, 3) == [5]


def test_checked_mode_traps_instead(wasm: bytes) -> None:
    with Instance(compile_module(load(wasm), Options(checked=True))) as inst:
        with pytest.raises(GuestTrap, match="out of bounds"):
            inst.call("poke", abi.FIBERS, 1)
        assert inst.call("add", 2, 3) == [5]
