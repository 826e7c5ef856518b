"""Packages from the npm registry, by exact name and version, checked against the registry's integrity and a
SHA-256 pinned by the recipe.

The registry answers ``GET /<name>/<version>`` with that version's document, whose ``dist`` names the
tarball (``tarball``), its Subresource Integrity (``integrity``: ``sha512-<base64>``) and its SHA-1
(``shasum``), which is what ``npm install`` checks. capsule asks for that document (``$CAPSULE_NPM_REGISTRY``
moves the registry), downloads the tarball, and accepts it only when it has the pinned SHA-256 *and* the
digest the registry lists: a file that differs from either is removed and refused. No ``npm`` is needed:
capsule only wants files out of the package (SQLite's amalgamation in ``sqlite3``'s ``deps/``), never its
install scripts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from capsule.sources.fetch import FetchError, RegistryUnavailable, download, sha256_file

DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org"


def npm_registry() -> str:
    return (os.environ.get("CAPSULE_NPM_REGISTRY") or DEFAULT_NPM_REGISTRY).rstrip("/")


@dataclass(frozen=True)
class Dist:
    """Where a package version's tarball is and the digests the registry gives for it."""

    tarball: str
    integrity: str  # "sha512-<base64>" (may be empty for very old packages)
    shasum: str  # SHA-1, hex


def dist(name: str, version: str, registry: str | None = None) -> Dist:
    """The ``dist`` of ``name@version`` from the registry's version document."""
    url = f"{registry or npm_registry()}/{urllib.parse.quote(name, safe='@')}/{version}"
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            doc = json.load(resp)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise FetchError(f"the npm registry has no {name}@{version} ({url})") from None
        raise RegistryUnavailable(f"cannot reach the npm registry at {url}: {e}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise RegistryUnavailable(f"cannot reach the npm registry at {url}: {e}") from None
    except ValueError as e:
        raise FetchError(f"{url} did not answer with a JSON document: {e}") from None
    d = doc.get("dist") if isinstance(doc, dict) else None
    if not isinstance(d, dict) or not d.get("tarball"):
        raise FetchError(f"{url}: the registry's document has no dist.tarball")
    return Dist(str(d["tarball"]), str(d.get("integrity") or ""), str(d.get("shasum") or ""))


def check_listed(path: Path, listed: Dist) -> None:
    """Refuse (and remove) ``path`` unless it has the digests the registry lists for it."""
    data = path.read_bytes()
    algo, _, want = listed.integrity.partition("-")
    if algo in ("sha512", "sha384", "sha256") and want:
        got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
        if got != want:
            path.unlink()
            raise FetchError(f"{path.name}: the registry lists integrity {listed.integrity}, the download has "
                             f"{algo}-{got}: refusing it")
    if listed.shasum and hashlib.sha1(data).hexdigest() != listed.shasum:
        path.unlink()
        raise FetchError(f"{path.name}: the registry lists SHA-1 {listed.shasum}, the download differs: refusing it")


def download_package(name: str, version: str, sha256: str, dest: Path) -> Path:
    """``dest/<name>-<version>.tgz``, downloaded unless it is there with the pinned ``sha256``; checked against
    the pin and against the registry's digests."""
    path = dest / f"{name.replace('/', '-').lstrip('@')}-{version}.tgz"
    if path.is_file() and sha256_file(path) == sha256:
        return path
    listed = dist(name, version)
    download(listed.tarball, path, sha256)
    check_listed(path, listed)
    return path
