"""Booting Debian's kernels under qemu (``capsule.testing.qemu``): the initramfs, the VM's life tied to its
caller's (timeout, Ctrl-C, the caller killed outright), and CI's smoke run on 6.1 (``capsule.testing.vm``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from capsule.sources.fetch import FetchError
from capsule.testing.qemu import BUSYBOX, QEMU, VMTimeout, cpio, run_qemu

pytestmark = pytest.mark.usefixtures("vm_tools")
# qemu with neither kernel nor disk: the firmware finds nothing to boot and waits, a VM that never ends
IDLE_QEMU = [QEMU, "-nodefaults", "-display", "none", "-accel", "tcg", "-m", "64M", "-serial", "stdio"]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_cpio_is_what_the_kernel_unpacks(tmp_path: Path) -> None:
    archive = cpio([("bin", 0o040755, b""), ("bin/hello", 0o100755, b"#!/bin/sh\necho hi\n"),
                    ("odd", 0o100644, b"x" * 5)])
    res = subprocess.run([str(BUSYBOX), "cpio", "-id"], input=archive, cwd=tmp_path, capture_output=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "bin" / "hello").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert os.access(tmp_path / "bin" / "hello", os.X_OK)
    assert (tmp_path / "odd").read_bytes() == b"xxxxx"


def test_timeout_kills_qemu() -> None:
    pids: list[int | None] = []
    start = time.monotonic()
    with pytest.raises(VMTimeout, match="idle ran past 3 s and was killed"):
        run_qemu(IDLE_QEMU, timeout=3, name="idle", started=pids.append)
    assert time.monotonic() - start < 10
    assert len(pids) == 2 and pids[1] is None  # told the pid, then that it is gone
    assert isinstance(pids[0], int) and not alive(pids[0])


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from capsule.testing.qemu import run_qemu
    def tell(pid):
        if pid is not None:
            Path(sys.argv[1], "pid").write_text(str(pid))
    try:
        run_qemu({argv!r}, timeout=600, started=tell)
    except KeyboardInterrupt:
        Path(sys.argv[1], "interrupted").write_text("yes")
        raise
""").format(argv=IDLE_QEMU)


def _sigint_default() -> None:
    """A suite started in the background (``cmd &``) runs with SIGINT ignored, which Python children inherit
    and keep: the child must hear Ctrl-C as a terminal's foreground job does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_child(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stderr=subprocess.PIPE,
                             preexec_fn=_sigint_default)
    for _ in range(200):
        if (tmp_path / "pid").exists():
            return child, int((tmp_path / "pid").read_text())
        time.sleep(0.05)
    child.kill()
    raise AssertionError(f"the child never started qemu: {child.communicate()[1].decode()[-500:]}")


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_qemu_does_not_outlive_its_caller(tmp_path: Path, how: signal.Signals) -> None:
    child, qemu = start_child(tmp_path)
    try:
        assert alive(qemu)
        child.send_signal(how)
        child.wait(timeout=20)
        assert wait_dead(qemu), f"qemu {qemu} survived its caller's {how.name}"
        if how == signal.SIGINT:
            assert (tmp_path / "interrupted").exists()
    finally:
        if alive(qemu):
            os.kill(qemu, signal.SIGKILL)
        child.kill()
        child.wait()


@pytest.mark.vm
def test_smoke_on_debian_6_1() -> None:
    """CI's run: one boot of Debian 12's kernel, the probes and a few kernel-layer tests inside, in minutes."""
    from capsule.testing.vm import SUITES, run_kernel

    try:
        report = run_kernel("6.1", SUITES["smoke"])
    except FetchError as e:  # not cached, and the archive cannot be reached
        pytest.skip(f"Debian's 6.1 kernel is not cached and cannot be downloaded: {e}")
    assert report.status == 0 and report.ok, report
    assert report.profile == "map-v3"
    said = {p["name"]: p["ok"] for p in report.probes}
    assert not said["arena"] and not said["may_goto"] and not said["cpu_v4"] and said["bpf_loop"]
    assert report.counts["passed"] >= 20 and report.counts["failed"] == 0
    assert any(t.id.endswith("test_arena_build_runs_or_is_refused_naming_what_is_missing") and t.outcome == "passed"
               for t in report.tests)
    assert report.boot_seconds < 60
    assert any(f["verdict"] == "success" and f["processed_insns"] for f in report.figures)


def test_known_failures_are_told_from_new_ones(tmp_path: Path) -> None:
    from capsule.testing.vm import read_junit

    (tmp_path / "junit.xml").write_text("""<?xml version="1.0"?><testsuites><testsuite>
      <testcase classname="tests.wasi.test_programs" name="test_strings[kernel]">
        <failure message="MissingFeature: this kernel lacks BPF_MAP_TYPE_ARENA (used by map 'w')">tb</failure>
      </testcase>
      <testcase classname="tests.kernel.test_verifier_log" name="test_small_log_buffer_grows">
        <failure message="VerifierError: bpf(PROG_LOAD) failed with EINVAL">tb</failure></testcase>
      <testcase classname="tests.kernel.test_maps" name="test_other"><failure message="EINVAL">tb</failure></testcase>
      <testcase classname="tests.kernel.test_maps" name="test_ok"/>
      <testcase classname="tests.kernel.test_maps" name="test_skip"><skipped message="why"/></testcase>
    </testsuite></testsuites>""")
    on_6_1 = {t.id.split("::")[1]: t for t in read_junit(tmp_path / "junit.xml", "6.1")}
    arena = on_6_1["test_strings[kernel]"]
    assert arena.outcome == "expected" and "map window" in arena.message
    assert on_6_1["test_small_log_buffer_grows"].outcome == "expected"
    assert on_6_1["test_other"].outcome == "failed"  # EINVAL alone is expected only of the log-buffer test
    assert on_6_1["test_ok"].outcome == "passed" and on_6_1["test_skip"].outcome == "skipped"
    on_6_12 = read_junit(tmp_path / "junit.xml", "6.12")  # nothing is expected to fail there
    assert [t.outcome for t in on_6_12] == ["failed", "failed", "failed", "passed", "skipped"]


def test_the_full_suite_runs_lua_on_6_1_after_the_rest(tmp_path: Path) -> None:
    """``full`` on 6.1 adds a second pytest run (Lua's scripts on the map window), with its own JUnit report;
    6.12, which gets arena-v4, runs the suite alone."""
    from capsule.testing.vm import JUNIT, SUITES, guest_command

    full = SUITES["full"]
    on_6_1, on_6_12 = guest_command(full, tmp_path, [], "6.1"), guest_command(full, tmp_path, [], "6.12")
    runs = [line for line in on_6_1.splitlines() if " -m pytest " in line]
    assert len(runs) == 2 and all(str(tmp_path / name) in run for name, run in zip(JUNIT, runs, strict=True))
    assert runs[1].endswith("tests/compiler/test_map_window.py -k 'lua and map-v3'")
    assert [line for line in on_6_12.splitlines() if " -m pytest " in line] == runs[:1]


def test_a_vm_past_its_time_is_a_report_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """6.12's full run was killed at its timeout and the run ended in a traceback, losing the kernel's row."""
    from types import SimpleNamespace

    from capsule.testing import vm
    from capsule.testing.qemu import VMTimeout

    class Late:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def run(self, timeout: float) -> None:
            raise VMTimeout(f"the 6.12 VM ran past {timeout:.0f} s and was killed", "boot\n  .......... [ 82%]\n")

    monkeypatch.setattr(vm, "prepared", lambda label: SimpleNamespace(release="6.12.95"))
    monkeypatch.setattr(vm, "figure_objects", lambda *args: [])
    monkeypatch.setattr(vm, "VM", Late)
    report = vm.run_kernel("6.12", vm.SUITES["full"], timeout=5)
    assert not report.ok and report.error.endswith("ran past 5 s and was killed; the console's last line: "
                                                   "  .......... [ 82%]")
    assert "ran past 5 s" in vm.format_report([report])
