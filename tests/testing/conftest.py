"""The VM tests boot Debian kernels under qemu: they need qemu, busybox-static, kmod and zstd
(``scripts/setup-kernels.sh``), and do not run inside a VM themselves.

The smoke boot (``-m vm``) takes 4-7 minutes of TCG emulation on two busy cores and needs the kernel packages
(downloaded by apt on first use), so the regular suite leaves it out: ``CAPSULE_SLOW=1``, ``-m vm`` or
``make test-kernels-smoke`` run it. The qemu life-cycle tests need no kernel and stay in."""

from __future__ import annotations

import os

import pytest

from capsule.testing.qemu import missing_tools


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a Debian kernel under qemu (capsule.testing.vm)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) the boots unless asked for, so the regular suite reports no skip for them."""
    if os.environ.get("CAPSULE_SLOW") == "1" or "vm" in (config.option.markexpr or ""):
        return
    boots = [i for i in items if i.get_closest_marker("vm")]
    if boots:
        config.hook.pytest_deselected(items=boots)
        items[:] = [i for i in items if not i.get_closest_marker("vm")]


@pytest.fixture
def vm_tools() -> None:
    if os.environ.get("CAPSULE_VM"):
        pytest.skip(f"already inside the {os.environ['CAPSULE_VM']} VM")
    missing = missing_tools()
    if missing:
        pytest.skip(f"booting kernels needs {', '.join(missing)}: run scripts/setup-kernels.sh")
