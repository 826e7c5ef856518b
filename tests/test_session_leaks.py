"""The session-level leak check of tests/conftest.py, run on sample sessions: each kind of leftover fails the run
and is named, with and without pytest-xdist, and a clean session passes."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.requires_bpf  # the samples create maps, pins and namespaces (in child processes)

CLEAN = """
def test_nothing_left():
    assert True
"""

LEAKY = """
import subprocess
from pathlib import Path

import pytest

from capsule.kernel import Map, MapType
from tests.leaks import netns_name, pin_path

HELD = []


def test_child_left_running():
    child = subprocess.Popen(["sleep", "60"])
    Path("{pids}").write_text(str(child.pid))


@pytest.mark.requires_bpf
def test_map_kept_in_a_global():
    HELD.append(Map.create(MapType.ARRAY, 4, 4, 1, name="leak_global"))


def test_pin_left():
    path = pin_path("sample")
    Path("{pins}").write_text(str(path))
    subprocess.run(["bpftool", "map", "create", str(path), "type", "array", "key", "4", "value", "4",
                    "entries", "1", "name", "leak_pinned"], check=True)


def test_netns_left():
    name = netns_name("sample")
    Path("{netns}").write_text(name)
    subprocess.run(["ip", "netns", "add", name], check=True)
"""


def _session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, body: str,
             *args: str) -> pytest.RunResult:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CAPSULE_LEAK_SETTLE", "1")
    pytester.makeconftest("from tests.conftest import *  # noqa: F403 - the hooks under test\n")
    pytester.makeini("[pytest]\nmarkers =\n    requires_bpf: needs BPF\naddopts = --strict-markers\n")
    pytester.makepyfile(test_sample=body)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


@pytest.mark.parametrize("xdist", [False, True], ids=["one-process", "xdist"])
def test_clean_session_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: bool) -> None:
    result = _session(pytester, monkeypatch, CLEAN, *(["-n", "2"] if xdist else []))
    assert result.ret == 0, result.stdout.str()
    assert "left behind by the session" not in result.stdout.str()


@pytest.mark.parametrize("xdist", [False, True], ids=["one-process", "xdist"])
def test_every_leftover_fails_the_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     xdist: bool) -> None:
    files = {k: tmp_path / k for k in ("pids", "pins", "netns")}
    body = LEAKY.replace("{pids}", str(files["pids"])).replace("{pins}", str(files["pins"])) \
        .replace("{netns}", str(files["netns"]))
    try:
        result = _session(pytester, monkeypatch, body, *(["-n", "2", "--dist", "loadfile"] if xdist else []))
        out = result.stdout.str()
        assert result.ret == pytest.ExitCode.TESTS_FAILED, out
        result.assert_outcomes(passed=4)  # every test passed: only the session check fails the run
        assert "left behind by the session" in out
        child = files["pids"].read_text()
        assert f"process left running: pid {child}: sleep 60" in out
        assert "(anon_inode:bpf-map) still open" in out
        assert f"pin {files['pins'].read_text()}" in out
        assert f"network namespace {files['netns'].read_text()}" in out
        if not xdist:  # one process holds the map to the end: the kernel check names it too
            assert "(array leak_global" in out
        assert "(array leak_pinned" in out  # kept alive by the pin
    finally:
        if files["pids"].exists():
            try:
                os.kill(int(files["pids"].read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
        if files["pins"].exists():
            Path(files["pins"].read_text()).unlink(missing_ok=True)
        if files["netns"].exists():
            subprocess.run(["ip", "netns", "del", files["netns"].read_text()], check=False, capture_output=True)
