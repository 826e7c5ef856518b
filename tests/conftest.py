"""What every test shares: the fd-leak fixtures, the ``requires_bpf`` marker's guard, and the session's leak check.

``requires_bpf`` marks a test that needs the kernel's BPF (bpf(2): maps, programs, the arena, loading, XDP on
veth in a namespace), so that ``pytest -m "not requires_bpf"`` runs the rest without privileges. The marker
cannot be forgotten silently: while a test without it runs (its fixtures' set-up and tear-down included),
``capsule.kernel.sys`` answers every bpf(2) call with EPERM, as the kernel does for an unprivileged user, and
the test fails with a message that names the marker. Tests that reach the kernel only through a child process
(``capsule`` or ``bpftool`` run by ``subprocess``) are not seen here; running the unmarked tests as an
unprivileged user (``make test-unprivileged``) finds those.

After the whole session, the run fails if anything of the session outlives it (``tests/leaks.py`` says how each
is attributed on a shared kernel): a BPF program, map or link that was not there at the start and that a process
or pin of the session keeps alive (or nothing does), a pin or network namespace named with the session's token, a
process the session started, or a BPF descriptor a test process still holds. Under pytest-xdist each worker checks
its own descriptors and children and hands its findings to the controller, which checks the kernel once the
workers are gone.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
from collections.abc import Iterator
from typing import Any

import pytest

import capsule.kernel.sys as kernel_sys
import tests.bpf.btf_load as raw_btf_load
from tests import leaks
from tests.fds import new_fds, open_fds

MARKER = "requires_bpf"
pytest_plugins = ["pytester", "tests.verifier_cost"]  # pytester: tests/test_conftest.py runs the guard on a sample


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


# -- the session's leak check --------------------------------------------------------------------------------
class _SessionCheck:
    """What the session had when it started, and what it left behind."""

    def __init__(self, config: pytest.Config) -> None:
        self.worker = hasattr(config, "workerinput")
        self.fds = open_fds(kernel_only=True)
        self.kernel = leaks.KernelBaseline.take() if not self.worker and os.geteuid() == 0 else None
        self.found: list[str] = []

    def own(self) -> list[str]:
        """This process's BPF descriptors opened during the session and its children still running."""
        gc.collect()  # a dropped Program or Map closes on collection: a leak only if something still refers to it
        fds = [f"fd {fd} ({t}) still open in {leaks.describe_pid(os.getpid())}"
               for fd, t in new_fds(self.fds, open_fds(kernel_only=True)).items() if t.startswith("anon_inode:bpf")]
        return fds + [f"process left running: {leaks.describe_pid(p)}" for p in sorted(leaks.descendants(os.getpid()))]

    def session(self) -> list[str]:
        tok = leaks.token()
        ours = leaks.session_pids(tok) | {os.getpid()}
        found = [f"process left running: {leaks.describe_pid(p)}" for p in sorted(ours - {os.getpid()})]
        found += leaks.leftover_pins(tok) + leaks.leftover_netns(tok)
        if self.kernel is not None:
            found += leaks.leaked_objects(self.kernel, tok, ours)
        return found


_CHECK = pytest.StashKey[_SessionCheck]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or the only process): its token, for all it starts
        os.environ[leaks.SESSION_ENV] = str(os.getpid())
    config.stash[_CHECK] = _SessionCheck(config)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: a run without xdist does not know it
def pytest_testnodedown(node: Any, error: object) -> None:
    """(xdist, in the controller) a worker finished: keep what its own check found."""
    check = node.config.stash[_CHECK]
    check.found += getattr(node, "workeroutput", {}).get("capsule_leaks", [])


@pytest.hookimpl(trylast=True)  # after xdist has shut its workers down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    check = session.config.stash[_CHECK]
    own = leaks.settle(check.own)
    if check.worker:
        session.config.workeroutput["capsule_leaks"] = own  # type: ignore[attr-defined]
        return
    check.found = list(dict.fromkeys(check.found + own + leaks.settle(check.session)))
    if check.found and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    check = config.stash.get(_CHECK, None)
    if check is not None and check.found:
        terminalreporter.section("left behind by the session", sep="=", red=True, bold=True)
        for line in check.found:
            terminalreporter.line(line)
        terminalreporter.line(f"{len(check.found)} thing(s) outlived the test session: the run fails")
