"""zlib 1.2.13: Debian's ``zlib`` source package (bookworm), and what building the library takes."""

from __future__ import annotations

from pathlib import Path

from capsule.sources.apt import DebianSource, debian_source
from capsule.sources.fetch import cache_root, stamped

ZLIB = DebianSource(
    package="zlib",
    version="1:1.2.13.dfsg-1",
    suite="bookworm",
    orig_sha256="71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1",
)

# The library's sources (zlib's Makefile OBJZ + OBJG), in its Makefile's order.
LIBRARY = ("adler32", "crc32", "deflate", "infback", "inffast", "inflate", "inftrees", "trees", "zutil",
           "compress", "uncompr", "gzclose", "gzlib", "gzread", "gzwrite")
# What zlib's ./configure decides on Linux with gcc, which holds for wasm32-wasi with wasi-libc too: the
# large-file functions, the visibility attribute, and <unistd.h> and <stdarg.h> (configure edits zconf.h to
# "#if 1" for these two; defining HAVE_* is the same without editing the tree).
CFLAGS = ("-D_LARGEFILE64_SOURCE=1", "-DHAVE_HIDDEN", "-DHAVE_UNISTD_H", "-DHAVE_STDARG_H")


def fetch(root: Path | None = None) -> Path:
    """zlib's source tree: ``zlib.h``, the library's ``.c`` files, ``test/example.c``, ``test/minigzip.c``.

    Raises RegistryUnavailable when it is not cached and the archive cannot be reached, FetchError when a
    download does not match its checksum.
    """
    return debian_source(ZLIB, root)


def cached(root: Path | None = None) -> Path | None:
    """The unpacked tree if it is in the cache (complete and made from the pinned tarball), else None."""
    return stamped((root or cache_root()) / ZLIB.dirname, ZLIB.orig_sha256)


def library(tree: Path) -> list[Path]:
    """The library's C files in ``tree`` (as returned by ``fetch()``)."""
    return [tree / f"{name}.c" for name in LIBRARY]
