"""What every third-party source shares: the errors, the cache, and fetching once under a lock into a tree
that appears complete or not at all.

A tree in the cache is trusted by its stamp: ``STAMP``, written last, holds the SHA-256 of the archive the
tree was unpacked from, so a tree left half-written by an interrupted run (no stamp) or made from another
archive (another digest) is fetched again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from capsule.toolchain.cache import cache_dir

STAMP = ".capsule-source"  # written last into an unpacked tree: its presence means the tree is complete


class FetchError(Exception):
    """A third-party source could not be fetched, verified or unpacked."""


class RegistryUnavailable(FetchError):
    """The registry could not be reached (no network, mirror down) and nothing is cached."""


def cache_root() -> Path:
    """The directory third-party sources are cached in (created on demand)."""
    return cache_dir("src")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stamped(tree: Path, digest: str) -> Path | None:
    """``tree`` if it is complete and was unpacked from the archive with SHA-256 ``digest``, else None."""
    try:
        return tree if (tree / STAMP).read_text().strip() == digest else None
    except OSError:
        return None


def fetch_once(tree: Path, digest: str, fetch: Callable[[], Path]) -> Path:
    """``tree`` from the cache, or made by ``fetch()`` while holding the tree's lock (parallel test workers
    share the cache: the second waits, then finds the first one's tree)."""
    hit = stamped(tree, digest)
    if hit is not None:
        return hit
    tree.parent.mkdir(parents=True, exist_ok=True)
    with _locked(tree.parent / f".{tree.name}.lock"):
        hit = stamped(tree, digest)  # another process may have finished while we waited
        return hit if hit is not None else fetch()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def staged(tree: Path, digest: str) -> Iterator[Path]:
    """A directory to build ``tree`` in (it does not exist yet: make it, or move a directory there); when the
    block ends without error it is stamped, last, and renamed to ``tree``, so the tree appears only complete."""
    with tempfile.TemporaryDirectory(prefix=f".{tree.name}-", dir=tree.parent) as tmp:
        top = Path(tmp) / tree.name
        yield top
        (top / STAMP).write_text(digest + "\n")
        if tree.exists():
            shutil.rmtree(tree)  # an incomplete tree left by an interrupted run (no valid stamp)
        os.replace(top, tree)


def download(url: str, path: Path, sha256: str, *, timeout: float = 120) -> Path:
    """Fetch ``url`` to ``path`` unless it is there with SHA-256 ``sha256``; refuse (and remove) a download
    with another digest. RegistryUnavailable when the address cannot be reached."""
    if path.is_file() and sha256_file(path) == sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + f".{os.getpid()}.part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(part, "wb") as out:
            shutil.copyfileobj(resp, out)
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        part.unlink(missing_ok=True)
        raise RegistryUnavailable(f"cannot download {url}: {e}") from None
    got = sha256_file(part)
    if got != sha256:
        part.unlink()
        raise FetchError(f"{path.name} has SHA-256 {got}, capsule pins {sha256}: refusing to build it")
    os.replace(part, path)
    return path


def extract(tar: tarfile.TarFile, prefix: str, dest: Path, keep: Callable[[str], bool] = lambda rel: True) -> list[str]:
    """Copy the regular files under ``prefix/`` in ``tar`` that ``keep`` accepts (it sees the path relative to
    ``prefix``) into ``dest``, keeping their relative paths; the paths copied. Links, devices and any path that
    would leave ``dest`` (absolute, ``..``) are skipped: a package's tree is plain files."""
    base = prefix.rstrip("/") + "/"
    copied = []
    for member in tar.getmembers():
        if not member.isfile() or not member.name.startswith(base):
            continue
        rel = member.name[len(base):]
        parts = rel.split("/")
        if not rel or rel.startswith("/") or ".." in parts or not keep(rel):
            continue
        data = tar.extractfile(member)
        assert data is not None  # a regular file always has contents
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.read())
        copied.append(rel)
    return copied
