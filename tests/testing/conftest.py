"""The VM tests boot Debian kernels under qemu: they need qemu, busybox-static, kmod and zstd
(``scripts/setup-kernels.sh``), and do not run inside a VM themselves."""

from __future__ import annotations

import os

import pytest

from capsule.testing.qemu import missing_tools


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a Debian kernel under qemu (capsule.testing.vm)")


@pytest.fixture
def vm_tools() -> None:
    if os.environ.get("CAPSULE_VM"):
        pytest.skip(f"already inside the {os.environ['CAPSULE_VM']} VM")
    missing = missing_tools()
    if missing:
        pytest.skip(f"booting kernels needs {', '.join(missing)}: run scripts/setup-kernels.sh")
