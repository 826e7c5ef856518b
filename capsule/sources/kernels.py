"""Debian's kernels, for booting under qemu: download a ``linux-image`` package, and make it fast to boot.

The package is found as Debian's own meta-package names it (``apt-cache depends [-t SUITE] linux-image-amd64``),
downloaded with ``apt-get download`` (apt checks it against the signed index) and unpacked with ``dpkg -x``
(``capsule.sources.apt``). Then, once per package:

- ``depmod -b`` writes the ``modules.dep`` that the .deb leaves out (modprobe in the guest needs it);
- the uncompressed ``vmlinux`` is cut out of ``vmlinuz``: under TCG decompressing the kernel takes ~15 s of
  every boot, and qemu boots the ELF directly (Debian builds with ``CONFIG_PVH``);
- ``boot_modules`` lists, in load order, the modules that mounting the host's file system needs (9p over
  virtio, overlay), decompressed where the package ships ``.ko.xz`` (busybox ``insmod`` reads only plain ones).
"""

from __future__ import annotations

import fcntl
import lzma
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capsule.sources.apt import PrivateApt, last_lines
from capsule.sources.fetch import FetchError, RegistryUnavailable, cache_root
from capsule.toolchain.cache import cache_dir

META_PACKAGE = "linux-image-amd64"
# what the guest's init loads to mount the host's / (9p over virtio) with a writable overlay on top
ROOT_MODULES = ("9pnet_virtio", "9p", "virtio_pci", "overlay")
_ELF = b"\x7fELF"
# compressed payloads of a bzImage, by magic: a decompressor per format (Debian: xz for 6.1, zstd for 6.12)
_XZ, _ZSTD, _GZIP = b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"\x1f\x8b\x08"


@dataclass(frozen=True)
class DebianKernel:
    """A kernel Debian 12 users run: ``label`` is how tests name it, ``suite`` the apt target release that
    carries it (None: the machine's default release)."""

    label: str
    suite: str | None = None


KERNELS = {"6.1": DebianKernel("6.1"), "6.12": DebianKernel("6.12", "bookworm-backports")}


@dataclass(frozen=True)
class BootableKernel:
    """An unpacked, prepared kernel package: what ``capsule.testing.qemu`` boots."""

    label: str
    package: str
    release: str  # uname -r, the name of its /lib/modules directory
    root: Path  # the package's directory in the cache
    vmlinux: Path

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    @property
    def modules_dir(self) -> Path:
        return self.tree / "lib" / "modules" / self.release


def kernels_dir() -> Path:
    return cache_dir("kernels")


def package_name(kernel: DebianKernel, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> str:
    """The ``linux-image-*`` package the meta-package depends on in ``kernel.suite`` (the machine's indexes)."""
    cmd = ["apt-cache", "depends", *(["-t", kernel.suite] if kernel.suite else []), META_PACKAGE]
    r = run(cmd, capture_output=True, text=True, check=False)
    m = re.search(r"Depends:\s*(linux-image-\S+)", r.stdout)
    if r.returncode != 0 or m is None:
        where = f" in {kernel.suite}" if kernel.suite else ""
        raise FetchError(f"apt knows no {META_PACKAGE}{where} (run scripts/setup-kernels.sh, which enables "
                         f"bookworm-backports and runs apt-get update): {last_lines(r.stderr or r.stdout)}")
    return m.group(1)


def prepared(label: str) -> BootableKernel:
    """The kernel called ``label`` ("6.1", "6.12"), downloaded and prepared once; later calls hit the cache.
    When apt cannot name or fetch the current package, a package prepared before is used instead."""
    kernel = KERNELS.get(label)
    if kernel is None:
        raise FetchError(f"no kernel {label!r} (known: {', '.join(KERNELS)})")
    try:
        package = package_name(kernel)
    except FetchError:
        cached = cached_package(label)
        if cached is None:
            raise
        package = cached
    root = kernels_dir() / package
    done = root / ".prepared"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        with open(root / ".lock", "a") as lock:  # two runs preparing the same package: the second waits
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                _download_and_prepare(package, root, label)
    release = _release(root / "tree")
    return BootableKernel(label, package, release, root, root / "vmlinux")


def _download_and_prepare(package: str, root: Path, label: str) -> None:
    try:
        PrivateApt(cache_root() / "apt" / "kernels").download_binary(package, root)
    except FetchError as e:
        raise RegistryUnavailable(f"cannot download {package}: {e}") from None
    _prepare(root)
    (root / "label").write_text(label + "\n")
    for deb in root.glob("*.deb"):  # the tree is what boots; the .deb would double the cache
        deb.unlink()
    (root / ".prepared").write_text(package + "\n")


def cached_package(label: str) -> str | None:
    """The newest package prepared for ``label``, if any."""
    found = sorted(p.name for p in kernels_dir().glob("linux-image-*")
                   if (p / ".prepared").exists() and (p / "label").read_text().strip() == label)
    return found[-1] if found else None


def _release(tree: Path) -> str:
    dirs = [p.name for p in (tree / "lib" / "modules").iterdir() if p.is_dir()]
    if len(dirs) != 1:
        raise FetchError(f"{tree}: expected one /lib/modules/RELEASE directory, found {dirs}")
    return dirs[0]


def _prepare(root: Path) -> None:
    tree = root / "tree"
    release = _release(tree)
    r = subprocess.run(["depmod", "-b", str(tree), release], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise FetchError(f"depmod -b {tree} {release} failed: {last_lines(r.stderr)} (package kmod)")
    vmlinuz = tree / "boot" / f"vmlinuz-{release}"
    (root / "vmlinux").write_bytes(extract_vmlinux(vmlinuz.read_bytes()))


def extract_vmlinux(image: bytes) -> bytes:
    """The ELF kernel inside a bzImage: the first compressed payload that decompresses to an ELF file."""
    for magic, inflate in ((_XZ, _inflate_xz), (_ZSTD, _inflate_zstd), (_GZIP, _inflate_gzip)):
        at = image.find(magic)
        while at >= 0:
            try:
                out = inflate(image[at:])
            except (lzma.LZMAError, OSError, EOFError, ValueError):
                out = b""
            if out.startswith(_ELF):
                return out
            at = image.find(magic, at + 1)
    raise FetchError("no xz, zstd or gzip payload in the kernel image decompresses to an ELF vmlinux")


def _inflate_xz(data: bytes) -> bytes:
    return lzma.LZMADecompressor().decompress(data)


def _inflate_gzip(data: bytes) -> bytes:
    import zlib

    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)


def _inflate_zstd(data: bytes) -> bytes:
    """zstd has no module in Python's standard library: the ``zstd`` program (it complains about the bytes
    after the frame, and still writes the frame)."""
    if shutil.which("zstd") is None:
        raise OSError("the zstd program is needed to unpack this kernel (package zstd)")
    return subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=False).stdout


# -- the modules the guest needs to mount its root ---------------------------------------------------------
def boot_modules(kernel: BootableKernel, wanted: tuple[str, ...] = ROOT_MODULES) -> list[Path]:
    """The module files to ``insmod`` for ``wanted``, dependencies first, built-in ones left out; each a plain
    ``.ko`` (decompressed next to the package's ``.ko.xz`` on first use)."""
    mdir = kernel.modules_dir
    deps: dict[str, list[str]] = {}
    for line in (mdir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {_module_name(p): p for p in deps}
    builtin = {_module_name(p) for p in (mdir / "modules.builtin").read_text().split()}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for d in deps.get(path, []):
            visit(d)
        order.append(path)

    for name in wanted:
        if name in builtin:
            continue
        if name not in by_name:
            raise FetchError(f"{kernel.package}: module {name} is neither built in nor shipped")
        visit(by_name[name])
    return [_plain(mdir / p) for p in order]


def _module_name(path: str) -> str:
    return re.sub(r"\.ko(\.xz|\.zst|\.gz)?$", "", path.rsplit("/", 1)[-1]).replace("-", "_")


def _plain(path: Path) -> Path:
    if path.suffix != ".xz":
        return path
    plain = path.with_suffix("")
    if not plain.exists():
        part = plain.with_name(plain.name + ".part")
        part.write_bytes(lzma.decompress(path.read_bytes()))
        part.replace(plain)
    return plain
