"""The optimizer's kernel tests must leave the fd table as they found it (as the kernel-layer tests do)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def no_fd_leak():
    before = sorted(os.listdir("/proc/self/fd"))
    yield
    after = sorted(os.listdir("/proc/self/fd"))
    leaked = {}
    for fd in sorted(set(after) - set(before)):
        try:
            leaked[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            leaked[fd] = "?"
    if leaked:
        pytest.fail(f"file descriptors leaked: {leaked}")
