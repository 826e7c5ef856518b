"""capsule.toolchain.cache: the one rule for where caches live, which every cache user follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsule.toolchain.cache import cache_dir


@pytest.mark.parametrize("capsule_cache,xdg,want", [
    ("/c", "/x", "/c/build"),  # CAPSULE_CACHE wins, and holds the kinds directly
    ("", "/x", "/x/capsule/build"),  # an empty CAPSULE_CACHE counts as unset
    (None, "/x", "/x/capsule/build"),
    (None, "", "~/.cache/capsule/build"),  # an empty XDG_CACHE_HOME counts as unset (the XDG rule)
    (None, None, "~/.cache/capsule/build"),
])
def test_cache_dir(capsule_cache: str | None, xdg: str | None, want: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("CAPSULE_CACHE", capsule_cache), ("XDG_CACHE_HOME", xdg)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert cache_dir("build") == Path(want).expanduser()


def test_every_cache_user_follows_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The guest builds, the sources, soft-float, the integer bench and the opt corpus all move with one
    variable (each had its own copy of the rule before)."""
    from capsule.bench import integers, opt_corpus
    from capsule.sources import fetch

    monkeypatch.setenv("CAPSULE_CACHE", str(tmp_path))
    monkeypatch.delenv("CAPSULE_OPT_CORPUS", raising=False)
    assert fetch.cache_root() == tmp_path / "src"
    assert opt_corpus.cache_root() == tmp_path / "opt-corpus"
    assert integers._cache_dir() == tmp_path / "bench-integers"
    monkeypatch.setenv("CAPSULE_OPT_CORPUS", str(tmp_path / "elsewhere"))  # the corpus's own override stays
    assert opt_corpus.cache_root() == tmp_path / "elsewhere"
