"""Source distributions from PyPI, by exact file name and pinned SHA-256.

Why not ``pip download``: pip cannot download an sdist without preparing its metadata, which runs the
project's ``setup.py`` (for lupa that builds the bundled LuaJIT: minutes, and a C toolchain for the host).
capsule asks the index pip itself uses (the PEP 691 JSON form of ``https://pypi.org/simple``;
``$CAPSULE_PYPI_INDEX`` moves it) for the file's address and SHA-256, downloads it, and checks it against both
that hash and the one pinned by the recipe: a different file under the same name is refused.
"""

from __future__ import annotations

import json
import os
import tarfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from capsule.sources.fetch import FetchError, RegistryUnavailable, download, extract, fetch_once, sha256_file, staged

DEFAULT_PYPI_INDEX = "https://pypi.org/simple"


def pypi_index() -> str:
    return (os.environ.get("CAPSULE_PYPI_INDEX") or DEFAULT_PYPI_INDEX).rstrip("/")


def sdist_url(project: str, filename: str, index: str | None = None) -> tuple[str, str]:
    """(address, sha256) of ``filename`` in ``project``'s page of the simple index (PEP 691 JSON)."""
    url = f"{index or pypi_index()}/{project}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            page = json.load(resp)
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise RegistryUnavailable(f"cannot reach the package index at {url}: {e}") from None
    except ValueError as e:
        raise FetchError(f"{url} did not answer with the JSON simple API: {e}") from None
    for f in page.get("files", []):
        if f.get("filename") == filename:
            return f["url"], f.get("hashes", {}).get("sha256", "")
    raise FetchError(f"{url} lists no file {filename}")


def download_sdist(project: str, filename: str, sha256: str, dest: Path) -> Path:
    """``dest/filename``, downloaded unless it is there with the pinned ``sha256``."""
    path = dest / filename
    if path.is_file() and sha256_file(path) == sha256:
        return path
    url, listed = sdist_url(project, filename)
    if listed and listed != sha256:
        raise FetchError(f"the index lists {filename} with SHA-256 {listed}, capsule pins {sha256}")
    return download(url, path, sha256)


def fetch_c_dir(project: str, filename: str, sha256: str, subdir: str, tree: Path, required: Sequence[str]) -> Path:
    """The C files and headers directly in ``subdir/`` of a pinned sdist, unpacked as ``tree`` (atomically,
    once: later calls find it cached); the sdist itself is kept in ``tree.parent / "pypi"``. Raises FetchError
    when a ``required`` file is not there."""

    def fetch_tree() -> Path:
        sdist = download_sdist(project, filename, sha256, tree.parent / "pypi")
        with staged(tree, sha256) as top, tarfile.open(sdist) as tar:
            top.mkdir()
            extract(tar, subdir, top, lambda rel: "/" not in rel and rel.endswith((".c", ".h")))
            missing = [name for name in required if not (top / name).is_file()]
            if missing:
                raise FetchError(f"{sdist.name} lacks {', '.join(missing)} in {subdir}/")
        return tree

    return fetch_once(tree, sha256, fetch_tree)
