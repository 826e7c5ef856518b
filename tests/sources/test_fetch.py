"""capsule.sources.fetch: a tree appears in the cache complete and stamped, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsule.sources.fetch import STAMP, FetchError, download, fetch_once, sha256_file, staged, stamped


def test_staged_tree_appears_only_complete(tmp_path: Path) -> None:
    tree = tmp_path / "pkg-1"
    with pytest.raises(RuntimeError), staged(tree, "abc") as top:
        top.mkdir()
        (top / "half.c").write_text("x")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []  # nothing left, not even the temporary directory
    tree.mkdir()
    (tree / "stale.c").write_text("from an earlier, unstamped run")
    assert stamped(tree, "abc") is None
    with staged(tree, "abc") as top:
        top.mkdir()
        (top / "a.c").write_text("a")
    assert sorted(p.name for p in tree.iterdir()) == [STAMP, "a.c"]  # the stale tree was replaced
    assert stamped(tree, "abc") == tree and stamped(tree, "other") is None


def test_fetch_once_fetches_only_what_is_missing(tmp_path: Path) -> None:
    tree = tmp_path / "pkg-1"
    calls = []

    def fetch() -> Path:
        calls.append(1)
        with staged(tree, "abc") as top:
            top.mkdir()
        return tree

    assert fetch_once(tree, "abc", fetch) == tree
    assert fetch_once(tree, "abc", fetch) == tree
    assert calls == [1]
    assert fetch_once(tree, "new", fetch) == tree and calls == [1, 1]  # another pin: fetched again


def test_download_checks_the_pin(tmp_path: Path) -> None:
    src = tmp_path / "a.tar.gz"
    src.write_bytes(b"contents")
    digest = sha256_file(src)
    got = download(src.as_uri(), tmp_path / "cache" / "a.tar.gz", digest)
    assert got.read_bytes() == b"contents"
    with pytest.raises(FetchError, match="capsule pins 0000"):
        download(src.as_uri(), tmp_path / "cache" / "b.tar.gz", "0" * 64)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["a.tar.gz"]  # the bad download is removed
