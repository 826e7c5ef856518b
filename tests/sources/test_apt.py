"""capsule.sources.apt without the network: the sources parser and the private apt configuration, with apt-get
faked (what it is asked to do, and how its answers are read)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from capsule.sources import apt
from capsule.sources.apt import PrivateApt, SourceEntry, read_sources, with_backports
from capsule.sources.fetch import RegistryUnavailable

DEB822 = """Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /k.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_read_sources_both_formats(tmp_path: Path) -> None:
    (tmp_path / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list").write_text("# a comment\ndeb [arch=amd64] http://old.example/debian bookworm main\n")
    entries = read_sources(tmp_path / "debian.sources", tmp_path / "sources.list")
    assert entries == [
        SourceEntry(("http://mirror.example/debian",), ("bookworm", "bookworm-updates"), ("main", "contrib"), "/k.gpg"),
        SourceEntry(("http://mirror.example/debian-security",), ("bookworm-security",)),
        SourceEntry(("http://old.example/debian",), ("bookworm",), ("main",)),
    ]
    assert [e.security for e in entries] == [False, True, False]
    assert read_sources(tmp_path / "missing", None) == []


def test_debian_mirror_skips_security_and_can_be_overridden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "debian.sources").write_text(DEB822.split("\n\n")[1])  # only the security archive
    (tmp_path / "sources.list").write_text("deb http://old.example/debian/ bookworm main\n")
    monkeypatch.setattr(apt, "SYSTEM_DEB822", tmp_path / "debian.sources")
    monkeypatch.setattr(apt, "SYSTEM_ONE_LINE", tmp_path / "sources.list")
    monkeypatch.delenv("CAPSULE_DEBIAN_MIRROR", raising=False)
    assert apt.debian_mirror() == "http://old.example/debian"
    monkeypatch.setenv("CAPSULE_DEBIAN_MIRROR", "http://local.example/debian")
    assert apt.debian_mirror() == "http://local.example/debian"


def test_backports_added_once() -> None:
    entries = [SourceEntry(("u",), ("bookworm",)), SourceEntry(("u",), ("bookworm", "bookworm-backports")),
               SourceEntry(("u-security",), ("bookworm-security",))]
    assert [e.suites for e in with_backports(entries)] == [("bookworm", "bookworm-backports"),
                                                           ("bookworm", "bookworm-backports")]


class FakeApt:
    """Records apt-get's arguments; answers from a script of (returncode, stderr) per subcommand."""

    def __init__(self, answers: dict[str, list[tuple[int, str]]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        self.calls.append(list(cmd))
        verb = next(a for a in ("update", "source", "download") if a in cmd)
        code, err = self.answers[verb].pop(0) if len(self.answers[verb]) > 1 else self.answers[verb][0]
        if verb == "update" and code == 0:
            lists = Path(next(o.split("=", 1)[1] for o in cmd if o.startswith("Dir::State::Lists=")))
            (lists / "mirror_dists_bookworm_main_source_Sources").write_text("")
        return subprocess.CompletedProcess(cmd, code, "", err)

    def verbs(self) -> list[str]:
        return [next(a for a in ("update", "source", "download") if a in c) for c in self.calls]


def test_update_once_per_sources_text(tmp_path: Path) -> None:
    fake = FakeApt({"update": [(0, "")]})
    entries = [SourceEntry(("http://mirror.example/debian",), ("bookworm",))]
    PrivateApt(tmp_path, entries, run=fake).update()
    PrivateApt(tmp_path, entries, run=fake).update()  # the same sources, lists present: nothing to do
    assert fake.verbs() == ["update"]
    opts = fake.calls[0]
    assert "Dir::Etc::SourceList=/dev/null" in opts and f"Dir::State::Lists={tmp_path / 'lists'}" in opts
    text = (tmp_path / "parts" / "capsule-src.sources").read_text()
    assert text.startswith("Types: deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm\n")
    PrivateApt(tmp_path, [SourceEntry(("http://other.example/debian",), ("bookworm",))], run=fake).update()
    assert fake.verbs() == ["update", "update"]  # another mirror: the lists are made again


def test_unreachable_archive_is_registry_unavailable(tmp_path: Path) -> None:
    fake = FakeApt({"update": [(0, "W: Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease")]})
    with pytest.raises(RegistryUnavailable, match=r"cannot reach the Debian archive at http://127\.0\.0\.1:9"):
        PrivateApt(tmp_path, [SourceEntry(("http://127.0.0.1:9/debian",), ("bookworm",))], run=fake).update()


def test_failed_source_refreshes_the_lists_once(tmp_path: Path) -> None:
    fake = FakeApt({"update": [(0, "")], "source": [(100, "E: Can not find version"), (0, "")]})
    res = PrivateApt(tmp_path, [SourceEntry(("u",), ("bookworm",))], run=fake).download_source("zlib=1", tmp_path / "d")
    assert res.returncode == 0
    assert fake.verbs() == ["update", "source", "update", "source"]  # the second update is forced
    assert "zlib=1" in fake.calls[1] and "--download-only" in fake.calls[1]
