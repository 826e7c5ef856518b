"""``manifest.json`` across builds of different suites: building one suite (``capsule bench opt --suite X``)
keeps the other suites' entries of the last build (regression: it used to keep only the suite just built)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from capsule.bench import opt_corpus
from capsule.bench.opt_corpus import Suite, build_corpus, load_manifest
from capsule.sources.apt import PrivateApt


def test_building_one_suite_keeps_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a binary suite whose package cannot be fetched is still an entry (a recorded failure): enough to test
    def no_apt(cmd: list[str], **kw: object) -> object:
        raise OSError(f"no network in this test: {cmd[0]}")

    def failing(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(cmd, 100, "", "E: Unable to locate package")

    for name in ("one", "two"):
        monkeypatch.setitem(opt_corpus.SUITES, name, Suite(name, "binary", (f"pkg-{name}",)))
    apt = PrivateApt(tmp_path / "apt", run=failing)
    build_corpus(["one", "two"], root=tmp_path, apt=apt, run=no_apt)
    assert load_manifest(tmp_path).summary() == {"one": {"built": 0, "failed": 1}, "two": {"built": 0, "failed": 1}}

    (tmp_path / "manifest.json").write_text(json.dumps(
        json.loads((tmp_path / "manifest.json").read_text()) + [{"suite": "gone", "name": "x", "cpu": "v3",
                                                                "path": "/x.o", "ok": True}]))
    build_corpus(["two"], root=tmp_path, apt=apt, run=no_apt)
    summary = load_manifest(tmp_path).summary()
    assert summary == {"one": {"built": 0, "failed": 1}, "gone": {"built": 1, "failed": 0},
                       "two": {"built": 0, "failed": 1}}
    assert len([o for o in load_manifest(tmp_path).objects if o.suite == "two"]) == 1  # replaced, not appended
    assert not list(tmp_path.glob("manifest.json.*"))  # the temporary file was renamed into place
