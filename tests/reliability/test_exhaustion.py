"""Running out (issue 15.2): a guest asking for more than the 4 GiB window, a guest stack overflowing at many
depths and stack sizes, and a full file system under --out each end in a clean report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.wasi.harness import engine_params

HERE = Path(__file__).parent
TRAP_STATUS = 134


def _capsule(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("engine", engine_params())
def test_asking_for_more_than_the_window(engine: str) -> None:
    res = _capsule("run", "--engine", engine, str(HERE / "exhaust.c"))
    assert res.returncode == 0, res.stderr
    assert res.stdout == ("malloc 4 GiB: NULL\ncalloc 64 Ki x 64 Ki: NULL\nmemory.grow 65536 pages: -1\n"
                          "memory.grow 0x7fffffff pages: -1\nthen malloc 1 MiB: ok\n")


@pytest.fixture(scope="module", params=[None, 1 << 16], ids=["default-stack", "64KiB-stack"])
def stack_object(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    obj = tmp_path_factory.mktemp("stack") / "stack_depth.bpf.o"
    size = ["--stack-size", str(request.param)] if request.param else []
    res = _capsule("build", str(HERE / "stack_depth.c"), *size, "-o", str(obj))
    assert res.returncode == 0, res.stderr
    return obj


@pytest.mark.requires_bpf
@pytest.mark.parametrize("frame", [1, 24, 700, 4096, 100_000, 10_000_000])
def test_stack_overflow_at_any_depth_is_a_clean_trap(stack_object: Path, frame: int) -> None:
    res = _capsule("run", str(stack_object), str(frame))
    assert res.stdout == f"frame {frame}\n"
    assert res.returncode == TRAP_STATUS and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"capsule: {stack_object.name}: guest trap: call stack exhausted\n")
    assert "\n  in down\n" in res.stderr  # the backtrace (from memset, when the trap is inside it)


@pytest.fixture
def small_fs(tmp_path: Path) -> object:
    """A 1 MiB memory file system, unmounted after the test."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.requires_bpf
def test_a_full_file_system_under_out(small_fs: Path) -> None:
    (small_fs / "result.bin").write_bytes(b"before")
    res = _capsule("run", "--out", str(small_fs), str(HERE / "long_run.c"), "4")
    assert res.returncode == 1 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert "cannot write guest file '/result.bin'" in res.stderr and "No space left on device" in res.stderr
    assert [p.name for p in small_fs.iterdir()] == ["result.bin"]  # no temporary file left
    assert (small_fs / "result.bin").read_bytes() == b"before"  # and the old file untouched
