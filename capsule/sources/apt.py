"""Debian packages through apt: source packages (``apt-get source``) and binary packages (``apt-get
download``), fetched under a private apt configuration, and source packages verified against a pinned hash.

Private: apt runs with its own sources file, lists and cache below a directory of capsule's cache rather than
with a ``deb-src`` entry added to the machine's ``/etc/apt``, because fetching a source must not need root,
must not change what ``apt-get upgrade`` sees on the machine, and must work the same on a developer's laptop
and in CI. The archive's address comes from the machine's own apt sources (as ``scripts/setup.sh`` does for
backports), so a machine behind a local mirror uses that mirror; the archive keyring is the machine's.

Users: the recipes (``capsule.sources.zlib``: one source package at a pinned version) and the optimiser's
benchmark corpus (``capsule.bench.opt_corpus``: the newest source of several packages, and Debian's own
binary packages).
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from capsule.sources.fetch import FetchError, RegistryUnavailable, cache_root, fetch_once, sha256_file, staged

DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SYSTEM_DEB822 = Path("/etc/apt/sources.list.d/debian.sources")
SYSTEM_ONE_LINE = Path("/etc/apt/sources.list")
APT_TIMEOUT_S = 600

Progress = Callable[[str], None]
Runner = Callable[..., subprocess.CompletedProcess[str]]


def _quiet(message: str) -> None:
    pass


# -- the machine's apt sources ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceEntry:
    """One entry of an apt sources list (a deb822 stanza, or a line of the one-line format)."""

    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...] = ("main",)
    signed_by: str = str(DEBIAN_KEYRING)

    @property
    def security(self) -> bool:
        return any("security" in u for u in self.uris)

    def deb_src(self) -> str:
        """The entry as a ``deb-src`` stanza of a private sources file."""
        return (f"Types: deb-src\nURIs: {' '.join(self.uris)}\nSuites: {' '.join(self.suites)}\n"
                f"Components: {' '.join(self.components)}\nSigned-By: {self.signed_by}\n")


def read_sources(deb822: Path, one_line: Path | None = None) -> list[SourceEntry]:
    """The machine's apt entries: the deb822 file's stanzas, then the one-line file's ``deb``/``deb-src`` lines
    (a missing file has none)."""
    entries: list[SourceEntry] = []
    try:
        text = deb822.read_text()
    except OSError:
        text = ""
    for block in re.split(r"\n\s*\n", text):
        fields = {m[1]: m[2] for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", block, re.M)}
        uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
        if uris and suites:
            entries.append(SourceEntry(tuple(uris), tuple(suites), tuple(fields.get("Components", "main").split()),
                                       fields.get("Signed-By", str(DEBIAN_KEYRING))))
    try:
        lines = one_line.read_text().splitlines() if one_line is not None else []
    except OSError:
        lines = []
    for line in lines:
        parts = [p for p in line.split() if not p.startswith("[")]
        if len(parts) >= 3 and parts[0] in ("deb", "deb-src"):
            entries.append(SourceEntry((parts[1],), (parts[2],), tuple(parts[3:]) or ("main",)))
    return entries


def debian_mirror() -> str:
    """The Debian archive this machine uses (``$CAPSULE_DEBIAN_MIRROR`` overrides it): the first address of
    its sources that is not the security archive."""
    if os.environ.get("CAPSULE_DEBIAN_MIRROR"):
        return os.environ["CAPSULE_DEBIAN_MIRROR"]
    for entry in read_sources(SYSTEM_DEB822, SYSTEM_ONE_LINE):
        if not entry.security:
            return entry.uris[0].rstrip("/")
    return DEFAULT_DEBIAN_MIRROR


def with_backports(entries: Sequence[SourceEntry]) -> list[SourceEntry]:
    """The archive entries (security left out), each with its release's backports suite added."""
    out = []
    for e in entries:
        if e.security:
            continue
        release = e.suites[0].split("-")[0]
        suites = e.suites if f"{release}-backports" in e.suites else (*e.suites, f"{release}-backports")
        out.append(SourceEntry(e.uris, suites, e.components, e.signed_by))
    return out


# -- apt with a private configuration -----------------------------------------------------------------------
@dataclass
class PrivateApt:
    """apt-get with its own sources, lists and cache under ``root``: the machine's apt state is untouched.

    ``entries`` are the ``deb-src`` entries to use; None derives them from the machine's own sources (read when
    first needed: ``with_backports(read_sources(system_sources))``). ``run`` runs every command (tests pass a
    fake). Binary packages come through the machine's own indexes, which any Debian machine has.
    """

    root: Path
    entries: Sequence[SourceEntry] | None = None
    system_sources: Path = SYSTEM_DEB822
    run: Runner = field(default=subprocess.run)

    def options(self) -> list[str]:
        r = self.root
        return ["-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={r / 'parts'}",
                "-o", f"Dir::State::Lists={r / 'lists'}", "-o", f"Dir::Cache={r / 'cache'}",
                "-o", "APT::Get::List-Cleanup=0", "-o", f"APT::Sandbox::User={pwd.getpwuid(os.getuid()).pw_name}",
                "-o", "Acquire::Retries=2"]

    def sources_text(self) -> str:
        """The private sources file: one deb-src stanza per entry."""
        entries = self.entries
        if entries is None:
            entries = with_backports(read_sources(self.system_sources))
        if not entries:
            raise FetchError(f"{self.system_sources}: no Debian archive entry to derive deb-src lines from")
        return "\n".join(e.deb_src() for e in entries)

    def has_lists(self) -> bool:
        lists = self.root / "lists"
        return lists.is_dir() and any("_Sources" in p.name for p in lists.iterdir())

    def update(self, progress: Progress = _quiet, *, force: bool = False) -> None:
        """``apt-get update`` into the private lists, unless they were made from the same sources (or
        ``force``). RegistryUnavailable when apt cannot fetch the indexes."""
        parts = self.root / "parts"
        for d in (parts, self.root / "lists" / "partial", self.root / "cache" / "archives" / "partial"):
            d.mkdir(parents=True, exist_ok=True)
        src = parts / "capsule-src.sources"
        text = self.sources_text()
        if not force and src.exists() and src.read_text() == text and self.has_lists():
            return
        src.write_text(text)
        progress("apt-get update (private deb-src lists)")
        res = self.apt_get("update")
        if res.returncode != 0 or re.search(r"^(W|E): (Failed to fetch|Some index files)", res.stderr, re.M):
            uris = ", ".join(dict.fromkeys(u for line in text.splitlines() if line.startswith("URIs:")
                                           for u in line.split()[1:]))
            raise RegistryUnavailable(f"cannot reach the Debian archive at {uris}: "
                                      f"{last_lines(res.stderr or res.stdout)}")

    def apt_get(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``apt-get`` with the private configuration (quiet, C locale, never interactive)."""
        env = {**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
        return self.run(["apt-get", "-q", *self.options(), *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=APT_TIMEOUT_S, check=False)

    def download_source(self, package: str, dest: Path,
                        progress: Progress = _quiet) -> subprocess.CompletedProcess[str]:
        """``apt-get source --download-only PACKAGE`` (``name=version`` pins one) into ``dest``; when it fails
        the lists are refreshed once (a point release may have moved on) and it is tried again. apt fails the
        whole command when one file is missing on the mirror but keeps what it fetched, so the caller judges
        the result by the files it needs."""
        dest.mkdir(parents=True, exist_ok=True)
        self.update(progress)
        progress(f"apt-get source {package}")
        res = self.apt_get("source", "--download-only", package, cwd=dest)
        if res.returncode != 0:
            self.update(progress, force=True)
            res = self.apt_get("source", "--download-only", package, cwd=dest)
        return res

    def download_binary(self, package: str, dest: Path, progress: Progress = _quiet) -> Path:
        """``apt-get download`` (the machine's binary indexes) and unpack with ``dpkg-deb -x``: the tree."""
        dest.mkdir(parents=True, exist_ok=True)
        tree = dest / "tree"
        done = dest / ".unpacked"
        if done.exists():
            return tree
        debs = sorted(dest.glob(f"{package}_*.deb"))
        if not debs:
            progress(f"apt-get download {package}")
            self._check(["apt-get", "download", "-qq", package], cwd=dest)
            debs = sorted(dest.glob(f"{package}_*.deb"))
            if not debs:
                raise FetchError(f"apt-get download {package}: no .deb fetched")
        tree.mkdir(exist_ok=True)
        self._check(["dpkg-deb", "-x", str(debs[-1]), str(tree)], cwd=None)
        done.write_text(debs[-1].name)
        return tree

    def _check(self, cmd: list[str], cwd: Path | None) -> None:
        r = self.run(cmd, cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            raise FetchError(f"{' '.join(cmd[:2])} ... failed ({r.returncode}): {r.stderr.strip()[-300:]}")


def last_lines(text: str, n: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-n:])


# -- a source package at a pinned version -------------------------------------------------------------------
@dataclass(frozen=True)
class DebianSource:
    """One Debian source package at an exact version, with the upstream tarball's pinned SHA-256."""

    package: str
    version: str  # the Debian version, epoch included ("1:1.2.13.dfsg-1")
    suite: str  # the archive suite that carries it ("bookworm")
    orig_sha256: str
    component: str = "main"

    @property
    def upstream(self) -> str:
        """The upstream version: no epoch, no Debian revision ("1.2.13.dfsg")."""
        v = self.version.split(":", 1)[-1]
        return v.rsplit("-", 1)[0] if "-" in v else v

    @property
    def dirname(self) -> str:
        return f"{self.package}-{self.upstream}"

    @property
    def files_stem(self) -> str:
        """How the package's files are named: ``zlib_1.2.13.dfsg-1`` (no epoch)."""
        return f"{self.package}_{self.version.split(':', 1)[-1]}"


def debian_source(src: DebianSource, root: Path | None = None) -> Path:
    """Fetch, verify and unpack a Debian source package's upstream tree; return its directory.

    The tree is the upstream (``.orig``) tarball unpacked as is. Debian's own patches are not applied: they
    adapt packaging and build files, while capsule builds the sources with its own flags (for zlib they only
    touch contrib/minizip's Makefile). Raises RegistryUnavailable when it is not cached and the archive cannot
    be reached, FetchError when a download does not match its checksum.
    """
    root = root or cache_root()

    def fetch() -> Path:
        files = _download(src, root)
        return _unpack(verify(src, files), root / src.dirname, src.orig_sha256)

    return fetch_once(root / src.dirname, src.orig_sha256, fetch)


def _download(src: DebianSource, root: Path) -> dict[str, Path]:
    """The source package's files (.dsc and tarballs), downloaded with apt, by name."""
    entry = SourceEntry((debian_mirror(),), (src.suite,), (src.component,))
    apt = PrivateApt(root / "apt" / src.suite, [entry])
    dest = root / "debian" / src.files_stem
    res = apt.download_source(f"{src.package}={src.version}", dest)
    if res.returncode != 0:
        err = last_lines(res.stderr or res.stdout)
        if re.search(r"Unable to find a source package|Can not find version", err):
            raise FetchError(f"the archive at {debian_mirror()} ({src.suite}) has no source package "
                             f"{src.package} {src.version}: {err}")
        raise RegistryUnavailable(f"cannot download {src.package} {src.version}: {err}")
    return {p.name: p for p in dest.iterdir() if p.is_file()}


def dsc_checksums(dsc_text: str) -> dict[str, tuple[str, int]]:
    """The ``Checksums-Sha256`` field of a .dsc: file name -> (sha256, size)."""
    out: dict[str, tuple[str, int]] = {}
    m = re.search(r"^Checksums-Sha256:[ \t]*\n((?:[ \t]+\S.*\n?)+)", dsc_text, re.MULTILINE)
    if m is None:
        return out
    for line in m.group(1).splitlines():
        digest, size, name = line.split()
        out[name] = (digest, int(size))
    return out


def verify(src: DebianSource, files: dict[str, Path]) -> Path:
    """Check every downloaded file against the .dsc and the upstream tarball against the pinned hash;
    return the upstream tarball. (apt checked the .dsc against the Sources index, whose hash is in the signed
    InRelease; the pin refuses a different tarball under the same version, from a mirror or a rebuilt archive.)"""
    dsc_name = f"{src.files_stem}.dsc"
    if dsc_name not in files:
        raise FetchError(f"apt did not download {dsc_name} (got {sorted(files)})")
    sums = dsc_checksums(files[dsc_name].read_text())
    origs = [n for n in sums if re.search(r"\.orig\.tar\.(gz|bz2|xz)$", n)]
    if len(origs) != 1:
        raise FetchError(f"{dsc_name} names {len(origs)} upstream tarballs, expected one")
    for name, (digest, size) in sums.items():
        path = files.get(name)
        if path is None:
            raise FetchError(f"apt did not download {name}, listed in {dsc_name}")
        if path.stat().st_size != size or sha256_file(path) != digest:
            path.unlink()
            raise FetchError(f"{name} does not match the checksum in {dsc_name}; removed it")
    orig = files[origs[0]]
    got = sha256_file(orig)
    if got != src.orig_sha256:
        raise FetchError(f"{orig.name} has SHA-256 {got}, capsule pins {src.orig_sha256} for "
                         f"{src.package} {src.version}: refusing to build it")
    return orig


def _unpack(tarball: Path, tree: Path, digest: str) -> Path:
    """Unpack ``tarball`` (one top-level directory) as ``tree``, atomically (``staged``)."""
    with staged(tree, digest) as top, tarfile.open(tarball) as tar:
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        if len(tops) != 1:
            raise FetchError(f"{tarball.name} has {len(tops)} top-level entries, expected one directory")
        unpacked = top.with_name(top.name + ".unpacked")
        tar.extractall(unpacked, filter="data")
        os.replace(unpacked / tops.pop(), top)
    return tree
