"""Shared fixtures for the kernel-layer tests: every test must leave the process's fd table as it found it."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def open_fds() -> list[str]:
    return sorted(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def no_fd_leak():
    """Fail a test that leaves a file descriptor open (a map, program, link, BTF or mmap'd fd)."""
    before = open_fds()
    yield
    after = open_fds()
    if after != before:
        details = {}
        for fd in sorted(set(after) - set(before)):
            try:
                details[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                details[fd] = "?"
        gc.collect()  # an FD dropped without close() is closed by its __del__; still a failure
        pytest.fail(f"file descriptors leaked: {details}")
