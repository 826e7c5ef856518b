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
import urllib.error
import urllib.request
from pathlib import Path

from capsule.sources.fetch import FetchError, RegistryUnavailable, download, sha256_file

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
