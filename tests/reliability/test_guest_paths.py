"""A guest cannot make the host write outside --out or read outside what --file/--dir gave it (issue 15.3): paths
with ``..``, absolute and doubled slashes, host paths, very long names, NUL bytes, and a symlink in --out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from capsule.runtime.wasi_host import FILETYPE_DIRECTORY, FILETYPE_REGULAR_FILE, WasiError, WasiHost
from tests.wasi.harness import engine_params

PROGRAM = Path(__file__).with_name("guest_paths.c")
ESCAPES = ["../escape.txt", "/abs.txt", "//double.txt", "/data/../../../x.txt", "sub/../../../../up.txt",
           "./../dot.txt"]
ENOENT = "errno 2"  # Linux's ENOENT, which the guest's errno is (capsule/guest/include/errno.h)


def _run(engine: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", "run", "--engine", engine, *args],
                          capture_output=True, text=True, timeout=900, cwd=cwd)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("engine", engine_params())
def test_writes_stay_inside_out(engine: str, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    res = _run(engine, "--out", "out", "--dir", "data:/data", str(PROGRAM), "w", *ESCAPES, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert _tree(tmp_path) - {"data"} == {"out", *(f"out/{n}" for n in ("escape.txt", "abs.txt", "double.txt",
                                                                        "x.txt", "dot.txt"))}
    assert "sub/../../../../up.txt: " + ENOENT in res.stdout  # sub does not exist in the guest
    assert (tmp_path / "out" / "escape.txt").read_text() == "from the guest\n"


@pytest.mark.parametrize("engine", engine_params())
def test_reads_stay_inside_what_was_given(engine: str, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("inside\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    names = ["/data/in.txt", "/data/../secret.txt", "../secret.txt", str(secret), "/etc/hostname",
             "/proc/self/environ", "data/../../secret.txt"]
    res = _run(engine, "--dir", "data:/data", str(PROGRAM), "r", *names, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "r /data/in.txt: 7 bytes: inside"
    assert all(line.endswith(ENOENT) for line in lines[1:]), res.stdout
    assert "bytes: secret" not in res.stdout


@pytest.mark.parametrize("engine", engine_params())
def test_a_name_the_host_cannot_hold_is_refused_in_the_guest(engine: str, tmp_path: Path) -> None:
    """A name over NAME_MAX fails in the guest with ENAMETOOLONG, as on Linux, and the rest is written; the
    host's own refusal of such a name (for a guest that made one anyway) is test_write_back_refuses_before_writing."""
    res = _run(engine, "--out", "out", str(PROGRAM), "w", "first.txt", "n" * 300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["w first.txt: ok", f"w {'n' * 40}: errno 36"]
    assert _tree(tmp_path / "out") == {"first.txt"}


class _Listing(WasiHost):
    """A host whose guest file system is a fixed listing (write_back needs nothing else of the guest)."""

    def __init__(self, entries: list[tuple[str, int, bool, bytes]]) -> None:
        self.entries = entries

    def files(self) -> list[tuple[str, int, bool, bytes]]:
        return self.entries


@pytest.mark.parametrize("name,why", [("../up.txt", "leaves --out"), ("/a/../../up.txt", "leaves --out"),
                                      ("/nul\0byte", "NUL byte"), ("/" + "n" * 256, "over 255 bytes"),
                                      ("/link/f.txt", "leaves --out")])
def test_write_back_refuses_before_writing(name: str, why: str, tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "link").symlink_to(outside)
    host = _Listing([("/ok.txt", FILETYPE_REGULAR_FILE, True, b"ok"), ("/d", FILETYPE_DIRECTORY, True, b""),
                     (name, FILETYPE_REGULAR_FILE, True, b"x")])
    with pytest.raises(WasiError, match=why):
        host.write_back(out)
    assert _tree(out) == {"link"} and _tree(outside) == set()


def test_write_back_replaces_whole_files(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("old contents, longer than the new")
    host = _Listing([("/f.txt", FILETYPE_REGULAR_FILE, True, b"new"), ("/g.txt", FILETYPE_REGULAR_FILE, False, b"x")])
    assert host.write_back(tmp_path) == [tmp_path / "f.txt"]
    assert (tmp_path / "f.txt").read_bytes() == b"new"
    assert _tree(tmp_path) == {"f.txt"}  # no temporary file left, and unchanged files are not written
