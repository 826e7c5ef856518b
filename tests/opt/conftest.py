"""The optimizer's tests must leave the fd table as they found it (as the kernel-layer tests do)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fd_table_unchanged(no_fd_leak: None) -> None:
    """The shared check (``tests/conftest.py``), on every test here."""
