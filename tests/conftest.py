"""What every test shares: the fd-leak fixtures and the ``requires_bpf`` marker's guard.

``requires_bpf`` marks a test that needs the kernel's BPF (bpf(2): maps, programs, the arena, loading, XDP on
veth in a namespace), so that ``pytest -m "not requires_bpf"`` runs the rest without privileges. The marker
cannot be forgotten silently: while a test without it runs (its fixtures' set-up and tear-down included),
``capsule.kernel.sys`` answers every bpf(2) call with EPERM, as the kernel does for an unprivileged user, and
the test fails with a message that names the marker. Tests that reach the kernel only through a child process
(``capsule`` or ``bpftool`` run by ``subprocess``) are not seen here; running the unmarked tests as an
unprivileged user (``make test-unprivileged``) finds those.
"""

from __future__ import annotations

import ctypes
import errno
import gc
from collections.abc import Iterator

import pytest

import capsule.kernel.sys as kernel_sys
import tests.bpf.btf_load as raw_btf_load
from tests.fds import new_fds, open_fds

MARKER = "requires_bpf"
pytest_plugins = ["pytester"]  # tests/test_conftest.py runs the guard on a sample


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bless", action="store_true",
                     help="write what the code now produces into the text fixtures that differ (tests/opt/filetests)")


# -- fd leaks ------------------------------------------------------------------------------------------------
def _check_fds(kernel_only: bool) -> Iterator[None]:
    before = open_fds(kernel_only=kernel_only)
    yield
    leaked = new_fds(before, open_fds(kernel_only=kernel_only))
    if leaked:
        gc.collect()  # an FD dropped without close() is closed by its __del__: still a failure, but not the next test's
        pytest.fail(f"file descriptors leaked: {leaked}")


@pytest.fixture
def no_fd_leak() -> Iterator[None]:
    """Fail a test that leaves any file descriptor open (a map, program, link, BTF or file)."""
    yield from _check_fds(kernel_only=False)


@pytest.fixture
def no_kernel_fd_leak() -> Iterator[None]:
    """Fail a test that leaves a kernel object's fd open; files are not counted, for tests whose libraries keep
    a file open for good (matplotlib's font cache)."""
    yield from _check_fds(kernel_only=True)


# -- the requires_bpf guard ----------------------------------------------------------------------------------
class _BpfGuard:
    """Stands in for the bpf(2) system call while a test without the marker runs: records the call and fails
    it with EPERM. It replaces the two places a test process makes the call: capsule's loader and the raw
    BPF_BTF_LOAD the BTF tests use to ask the kernel without it."""

    CALLERS = (kernel_sys, raw_btf_load)

    def __init__(self) -> None:
        self.real = [m._syscall for m in self.CALLERS]
        self.calls: list[str] = []

    def __call__(self, nr: int, cmd: int, attr: object, size: int) -> int:
        names = getattr(kernel_sys, "Cmd", None)
        try:
            self.calls.append(names(cmd).name if names else str(cmd))
        except ValueError:
            self.calls.append(str(cmd))
        ctypes.set_errno(errno.EPERM)
        return -1

    def arm(self) -> None:
        self.calls = []
        for m in self.CALLERS:
            m._syscall = self

    def disarm(self) -> None:
        for m, real in zip(self.CALLERS, self.real, strict=True):
            m._syscall = real


_guard = _BpfGuard()


def _unmarked(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if _unmarked(item):
        _guard.arm()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        _guard.disarm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when in ("setup", "call", "teardown") and _unmarked(item) and _guard.calls:
        calls = sorted(set(_guard.calls))
        _guard.calls = []
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} called bpf(2) ({', '.join(calls)}) without the {MARKER} marker: mark "
                           f"it @pytest.mark.{MARKER} (or its module: pytestmark = pytest.mark.{MARKER})\n"
                           + (str(report.longrepr) if report.longrepr else ""))
    return report
