"""Third-party sources (zlib now; Lua, SQLite, QuickJS later), fetched from package registries and cached.

capsule runs real programs in the kernel, and their sources are never part of capsule's git tree: they are
fetched at build or test time through the registry's ordinary client and cached under
``~/.cache/capsule/src`` (``$CAPSULE_CACHE/src`` or ``$XDG_CACHE_HOME/capsule/src`` move it, as for
``capsule.toolchain_c``). Each package has one function here that returns the directory of its unpacked
sources; a second call finds the cache and touches no network.

Trust: every download is checked twice. The registry's client checks what it fetched (apt checks each file
of a source package against the ``Sources`` index, whose hash is in the signed ``InRelease``), and capsule
checks the upstream tarball against a SHA-256 pinned here, so a different tarball under the same version
(a mirror serving something else, a rebuilt archive) is refused rather than compiled.

Debian source packages are fetched with ``apt-get source --download-only`` under a *private* apt
configuration (its own sources file, lists and cache below the capsule cache) rather than by adding a
``deb-src`` entry to the machine's ``/etc/apt``: fetching a source must not need root, must not change what
``apt-get upgrade`` sees on the machine, and must work the same on a developer's laptop and in CI. The
archive's address is taken from the machine's own apt sources (as ``scripts/setup.sh`` does for backports),
so a machine behind a local mirror uses that mirror; the archive keyring is the machine's.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SYSTEM_DEB822 = Path("/etc/apt/sources.list.d/debian.sources")
SYSTEM_ONE_LINE = Path("/etc/apt/sources.list")
STAMP = ".capsule-source"  # written last into an unpacked tree: its presence means the tree is complete


class FetchError(Exception):
    """A third-party source could not be fetched, verified or unpacked."""


class RegistryUnavailable(FetchError):
    """The registry could not be reached (no network, mirror down) and nothing is cached."""


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


ZLIB = DebianSource(
    package="zlib",
    version="1:1.2.13.dfsg-1",
    suite="bookworm",
    orig_sha256="71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1",
)

# The library's sources (zlib's Makefile OBJZ + OBJG), in its Makefile's order.
ZLIB_LIBRARY = ("adler32", "crc32", "deflate", "infback", "inffast", "inflate", "inftrees", "trees", "zutil",
                "compress", "uncompr", "gzclose", "gzlib", "gzread", "gzwrite")
# What zlib's ./configure decides on Linux with gcc, which holds for wasm32-wasi with wasi-libc too: the
# large-file functions, the visibility attribute, and <unistd.h> and <stdarg.h> (configure edits zconf.h to
# "#if 1" for these two; defining HAVE_* is the same without editing the tree).
ZLIB_CFLAGS = ("-D_LARGEFILE64_SOURCE=1", "-DHAVE_HIDDEN", "-DHAVE_UNISTD_H", "-DHAVE_STDARG_H")


# -- where things live -------------------------------------------------------------------------------------
def cache_root() -> Path:
    """The directory third-party sources are cached in (created on demand)."""
    if os.environ.get("CAPSULE_CACHE"):
        return Path(os.environ["CAPSULE_CACHE"]) / "src"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capsule" / "src"


def cached(src: DebianSource, root: Path | None = None) -> Path | None:
    """The unpacked tree of ``src`` if it is in the cache (complete and made from the pinned tarball)."""
    tree = (root or cache_root()) / src.dirname
    stamp = tree / STAMP
    try:
        return tree if stamp.read_text().strip() == src.orig_sha256 else None
    except OSError:
        return None


# -- packages ----------------------------------------------------------------------------------------------
def zlib(root: Path | None = None) -> Path:
    """zlib 1.2.13's source tree (Debian's ``zlib`` source package, bookworm): ``zlib.h``, the library's
    ``.c`` files, ``test/example.c``, ``test/minigzip.c``.

    Raises RegistryUnavailable when it is not cached and the archive cannot be reached, FetchError when a
    download does not match its checksum.
    """
    return debian_source(ZLIB, root)


def zlib_library(tree: Path) -> list[Path]:
    """The library's C files in ``tree`` (as returned by ``zlib()``)."""
    return [tree / f"{name}.c" for name in ZLIB_LIBRARY]


def lua(root: Path | None = None) -> Path:
    """Lua 5.4.8's source tree, from the ``lupa`` 2.8 sdist on PyPI (``third-party/lua54``). The fetch and the
    interpreter's build recipe are in ``capsule.thirdparty_lua`` (PyPI, not apt, and a sdist pip cannot
    download without building it)."""
    from capsule.thirdparty_lua import fetch_lua

    return fetch_lua(root)


# -- Debian source packages --------------------------------------------------------------------------------
def debian_source(src: DebianSource, root: Path | None = None) -> Path:
    """Fetch, verify and unpack a Debian source package's upstream tree; return its directory.

    The tree is the upstream (``.orig``) tarball unpacked as is. Debian's own patches are not applied: they
    adapt packaging and build files, while capsule builds the sources with its own flags (for zlib they only
    touch contrib/minizip's Makefile).
    """
    root = root or cache_root()
    hit = cached(src, root)
    if hit is not None:
        return hit
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{src.package}.lock"):
        hit = cached(src, root)  # another process may have finished while we waited
        if hit is not None:
            return hit
        files = _apt_download(src, root)
        orig = _verify(src, files)
        return _unpack(orig, root / src.dirname, src.orig_sha256)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise fetches of one package between processes (parallel test workers share the cache)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def debian_mirror() -> str:
    """The Debian archive this machine uses (``$CAPSULE_DEBIAN_MIRROR`` overrides it)."""
    if os.environ.get("CAPSULE_DEBIAN_MIRROR"):
        return os.environ["CAPSULE_DEBIAN_MIRROR"]
    try:
        text = SYSTEM_DEB822.read_text()
        for m in re.finditer(r"^URIs:\s*(.+)$", text, re.MULTILINE):
            for uri in m.group(1).split():
                if "security" not in uri:
                    return uri.rstrip("/")
    except OSError:
        pass
    try:
        for line in SYSTEM_ONE_LINE.read_text().splitlines():
            parts = [p for p in line.split() if not p.startswith("[")]
            if len(parts) >= 3 and parts[0] in ("deb", "deb-src") and "security" not in parts[1]:
                return parts[1].rstrip("/")
    except OSError:
        pass
    return DEFAULT_DEBIAN_MIRROR


class _PrivateApt:
    """apt-get with its own sources, lists and cache under ``base``: the machine's apt state is untouched."""

    def __init__(self, base: Path, suite: str, component: str) -> None:
        if shutil.which("apt-get") is None:
            raise RegistryUnavailable("apt-get is not installed, so Debian source packages cannot be fetched")
        if not DEBIAN_KEYRING.is_file():
            raise FetchError(f"{DEBIAN_KEYRING} is missing (install debian-archive-keyring)")
        self.base = base
        parts = base / "sources.d"
        for d in (parts, base / "lists" / "partial", base / "cache" / "archives" / "partial"):
            d.mkdir(parents=True, exist_ok=True)
        (parts / "capsule-src.sources").write_text(
            f"Types: deb-src\nURIs: {debian_mirror()}\nSuites: {suite}\nComponents: {component}\n"
            f"Signed-By: {DEBIAN_KEYRING}\n")
        self.options = [
            "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={parts}",
            "-o", f"Dir::State::Lists={base / 'lists'}",
            "-o", f"Dir::Cache={base / 'cache'}",
            "-o", f"APT::Sandbox::User={pwd.getpwuid(os.getuid()).pw_name}",
            "-o", "Acquire::Retries=2",
        ]

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
        return subprocess.run(["apt-get", "-q", *self.options, *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=600, check=False)

    def has_lists(self) -> bool:
        return any(p.name.endswith(("_Sources", "_Sources.lz4", "_Sources.xz", "_Sources.gz"))
                   for p in (self.base / "lists").iterdir())

    def update(self) -> None:
        res = self.run("update")
        failed = res.returncode != 0 or re.search(r"^(W|E): (Failed to fetch|Some index files)", res.stderr, re.M)
        if failed or not self.has_lists():
            raise RegistryUnavailable(f"cannot reach the Debian archive at {debian_mirror()}: "
                                      f"{_last_lines(res.stderr or res.stdout)}")


def _apt_download(src: DebianSource, root: Path) -> dict[str, Path]:
    """Download the source package's files (.dsc and tarballs) with apt; return them by name."""
    apt = _PrivateApt(root / "apt" / src.suite, src.suite, src.component)
    dest = root / "debian" / f"{src.package}_{src.version.split(':', 1)[-1]}"
    dest.mkdir(parents=True, exist_ok=True)
    if not apt.has_lists():
        apt.update()
    res = apt.run("source", "--download-only", f"{src.package}={src.version}", cwd=dest)
    if res.returncode != 0:
        apt.update()  # the index may be stale (a point release moved on): refresh once and retry
        res = apt.run("source", "--download-only", f"{src.package}={src.version}", cwd=dest)
    if res.returncode != 0:
        err = _last_lines(res.stderr or res.stdout)
        if re.search(r"Unable to find a source package|Can not find version", err):
            raise FetchError(f"the archive at {debian_mirror()} ({src.suite}) has no source package "
                             f"{src.package} {src.version}: {err}")
        raise RegistryUnavailable(f"cannot download {src.package} {src.version}: {err}")
    return {p.name: p for p in dest.iterdir() if p.is_file()}


def _last_lines(text: str, n: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-n:])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


def _verify(src: DebianSource, files: dict[str, Path]) -> Path:
    """Check every downloaded file against the .dsc and the upstream tarball against the pinned hash;
    return the upstream tarball."""
    dsc_name = f"{src.package}_{src.version.split(':', 1)[-1]}.dsc"
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
        if path.stat().st_size != size or _sha256(path) != digest:
            path.unlink()
            raise FetchError(f"{name} does not match the checksum in {dsc_name}; removed it")
    orig = files[origs[0]]
    got = _sha256(orig)
    if got != src.orig_sha256:
        raise FetchError(f"{orig.name} has SHA-256 {got}, capsule pins {src.orig_sha256} for "
                         f"{src.package} {src.version}: refusing to build it")
    return orig


def _unpack(tarball: Path, tree: Path, digest: str) -> Path:
    """Unpack ``tarball`` (one top-level directory) as ``tree``, atomically: the stamp is written last and the
    directory appears under its final name only when complete."""
    parent = tree.parent
    with tempfile.TemporaryDirectory(prefix=f".{tree.name}-", dir=parent) as tmp:
        with tarfile.open(tarball) as tar:
            tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
            if len(tops) != 1:
                raise FetchError(f"{tarball.name} has {len(tops)} top-level entries, expected one directory")
            tar.extractall(tmp, filter="data")
        top = Path(tmp) / tops.pop()
        (top / STAMP).write_text(digest + "\n")
        if tree.exists():
            shutil.rmtree(tree)  # an incomplete tree left by an interrupted run (no valid stamp)
        os.replace(top, tree)
    return tree
