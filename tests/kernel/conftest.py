"""Every kernel-layer test must leave the process's fd table as it found it."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fd_table_unchanged(no_fd_leak: None) -> None:
    """The shared check (``tests/conftest.py``), on every test here."""
