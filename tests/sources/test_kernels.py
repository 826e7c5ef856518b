"""Debian kernel packages made bootable (``capsule.sources.kernels``): the package apt names, the vmlinux cut
out of a bzImage, and the modules mounting the root needs, in load order. Fakes stand in for apt and for the
package; ``tests/testing/test_vm.py`` boots the real ones."""

from __future__ import annotations

import gzip
import lzma
import subprocess
from pathlib import Path

import pytest

from capsule.sources.fetch import FetchError
from capsule.sources.kernels import BootableKernel, DebianKernel, boot_modules, extract_vmlinux, package_name

ELF = b"\x7fELF" + bytes(range(256)) * 64


def test_vmlinux_is_found_behind_false_starts() -> None:
    xz = lzma.compress(ELF)
    image = b"MZ" + b"\0" * 100 + xz[:6] + b"garbage" + b"\0" * 50 + xz + b"trailing bytes of the bzImage"
    assert extract_vmlinux(image) == ELF
    assert extract_vmlinux(b"setup code" + gzip.compress(ELF) + b"\0" * 10) == ELF
    zstd = subprocess.run(["zstd", "-q", "-c"], input=ELF, capture_output=True, check=True).stdout
    assert extract_vmlinux(b"\0" * 33 + zstd + b"tail") == ELF
    with pytest.raises(FetchError, match="decompresses to an ELF"):
        extract_vmlinux(b"\0" * 64 + lzma.compress(b"not an ELF file"))


def fake_apt(stdout: str, code: int = 0):
    def run(cmd, **kw):
        run.cmd = cmd
        return subprocess.CompletedProcess(cmd, code, stdout, "E: no such package" if code else "")

    return run


def test_package_is_what_the_meta_package_depends_on() -> None:
    run = fake_apt("linux-image-amd64\n  Depends: linux-image-6.12.95+deb12-amd64\n")
    assert package_name(DebianKernel("6.12", "bookworm-backports"), run) == "linux-image-6.12.95+deb12-amd64"
    assert run.cmd == ["apt-cache", "depends", "-t", "bookworm-backports", "linux-image-amd64"]
    with pytest.raises(FetchError, match="no linux-image-amd64 in bookworm-backports.*setup-kernels.sh"):
        package_name(DebianKernel("6.12", "bookworm-backports"), fake_apt("", 100))


def test_boot_modules_come_dependencies_first_and_decompressed(tmp_path: Path) -> None:
    mdir = tmp_path / "tree" / "lib" / "modules" / "6.12.0-test"
    k = mdir / "kernel"
    for name in ("fs/9p/9p", "net/9p/9pnet", "net/9p/9pnet_virtio", "fs/netfs/netfs", "fs/overlayfs/overlay"):
        (k / name).parent.mkdir(parents=True, exist_ok=True)
        (k / f"{name}.ko.xz").write_bytes(lzma.compress(name.encode()))
    (mdir / "modules.dep").write_text(
        "kernel/fs/9p/9p.ko.xz: kernel/fs/netfs/netfs.ko.xz kernel/net/9p/9pnet.ko.xz\n"
        "kernel/net/9p/9pnet.ko.xz:\nkernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz\n"
        "kernel/fs/netfs/netfs.ko.xz:\nkernel/fs/overlayfs/overlay.ko.xz:\n")
    (mdir / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\n")
    kernel = BootableKernel("6.12", "linux-image-test", "6.12.0-test", tmp_path, tmp_path / "vmlinux")
    mods = boot_modules(kernel)
    assert [m.name for m in mods] == ["9pnet.ko", "9pnet_virtio.ko", "netfs.ko", "9p.ko", "overlay.ko"]
    assert mods[0].read_bytes() == b"net/9p/9pnet"  # virtio_pci is built in: nothing to load
    with pytest.raises(FetchError, match="module vfat is neither built in nor shipped"):
        boot_modules(kernel, ("vfat",))
