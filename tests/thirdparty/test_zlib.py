"""zlib 1.2.13 (Debian's source package) built from the same sources natively and for capsule, run in the kernel.

- zlib's own ``test/example.c`` (deflate/inflate in every mode, dictionaries, sync, and gzip files written
  and read back through the guest's in-memory file system) prints exactly what the native build prints, and
  writes the same ``foo.gz``;
- ``test/minigzip.c`` compresses standard input to standard output byte for byte as natively, and the
  native build decompresses it;
- a round trip of 4 MB: the kernel deflates generated data and inflates what the native build deflated;
  the compressed streams are identical, the native build and Python's zlib inflate the kernel's.

The first run fetches zlib (apt, a few seconds) and builds it three ways (cached afterwards by content hash);
every run compiles each program to BPF and loads it, which is most of the time. The registry is only
needed when nothing is cached; without both, the tests skip and say why.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import time
import zlib as pyzlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.sources import apt, fetch, zlib
from capsule.testing.engines import open_guest
from capsule.toolchain.guest import build_wasm, runtime_objects, wasm_flags
from capsule.toolchain.native import build_native

HERE = Path(__file__).resolve().parent
NATIVE_CACHE = HERE.parent.parent / ".cache" / "tests" / "native"
ROUND_TRIP_SIZE = 4 << 20
ENV = ["LANG=C"]


@dataclass
class Run:
    stdout: bytes
    stderr: bytes
    code: int
    files: dict[str, bytes]  # files created or changed, by path relative to the working directory
    load_s: float = 0.0  # compile to BPF + verify + JIT (kernel), or 0 natively
    run_s: float = 0.0


@dataclass
class Programs:
    tree: Path
    wasm: dict[str, Path]
    native: dict[str, Path]


def _flags(tree: Path) -> list[str]:
    return ["-O2", f"-I{tree}", *zlib.CFLAGS]


def _digest(paths: list[Path], *extra: str) -> str:
    h = hashlib.sha256(repr(extra).encode())
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _archive(target: str, tree: Path, pool: ThreadPoolExecutor) -> Path:
    """zlib compiled once for ``target`` ("wasm" or "native") into ``libz.a``, one file per thread, cached
    in a directory named by the content hash of the sources, flags and compiler: the three programs link it
    instead of compiling the library three times (most of a first run's build time)."""
    lib = zlib.library(tree)
    if target == "wasm":
        cc, ar = ["clang-19", *wasm_flags(False)], "llvm-ar-19"
    else:
        cc, ar = ["gcc"], "ar"
    flags = [*_flags(tree), "-w"]
    version = subprocess.run([cc[0], "--version"], capture_output=True, text=True, check=True).stdout
    out = NATIVE_CACHE.parent / f"zlib-{target}-{_digest(lib, *cc, *flags, version)}"
    archive = out / "libz.a"
    if archive.is_file():
        return archive
    out.mkdir(parents=True, exist_ok=True)

    def compile_one(src: Path) -> Path:
        obj = out / f"{src.stem}.{os.getpid()}.o"  # private to this process: xdist workers may race here
        subprocess.run([*cc, *flags, "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
        return obj

    objs = list(pool.map(compile_one, lib))
    part = out / f"libz.a.{os.getpid()}"
    subprocess.run([ar, "rcs", str(part), *map(str, objs)], check=True, capture_output=True)
    os.replace(part, archive)
    for obj in objs:
        obj.unlink()
    return archive


def _native(name: str, main: Path, archive: Path, flags: list[str]) -> Path:
    """A native build of ``main`` linked with zlib, cached by content and flags."""
    exe = NATIVE_CACHE / f"zlib-{name}-{_digest([main], *flags, str(archive))}"
    if not exe.exists():
        NATIVE_CACHE.mkdir(parents=True, exist_ok=True)
        part = exe.with_name(f"{exe.name}.{os.getpid()}")
        build_native([main, archive], part, [*flags, "-w"])
        os.replace(part, exe)
    return exe


@pytest.fixture(scope="module")
def programs() -> Programs:
    try:
        tree = zlib.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"zlib is not cached and the Debian archive cannot be reached: {e}")
    mains = {"example": tree / "test" / "example.c", "minigzip": tree / "test" / "minigzip.c",
             "zround": HERE / "zround.c"}
    flags = _flags(tree)
    # Builds are subprocess-bound: run them side by side (each is cached after the first time).
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        # capsule's runtime objects first, in this thread: runtime_objects() names its temporary files by
        # process id, so two threads building them at once collide (reported to the toolchain's owner).
        runtime_objects()
        wasm_lib = _archive("wasm", tree, pool)
        native_lib = _archive("native", tree, pool)
        # The archive's directory name carries its content hash, so build_wasm's cache key follows it.
        wasm_flags_ = [*flags, "-Wno-deprecated-non-prototype", f"-L{wasm_lib.parent}", "-lz"]
        wasm = {n: pool.submit(build_wasm, [m], wasm_flags_) for n, m in mains.items()}
        native = {n: pool.submit(_native, n, m, native_lib, flags) for n, m in mains.items()}
        return Programs(tree, {n: f.result().wasm for n, f in wasm.items()},
                        {n: f.result() for n, f in native.items()})


def run_native(exe: Path, args: list[str], cwd: Path, files: dict[str, bytes] | None = None,
               stdin: bytes = b"") -> Run:
    cwd.mkdir(parents=True, exist_ok=True)
    for rel, data in (files or {}).items():
        (cwd / rel).write_bytes(data)
    t0 = time.perf_counter()
    res = subprocess.run(["prog", *args], executable=str(exe), cwd=cwd, env=dict(e.split("=", 1) for e in ENV),
                         input=stdin, capture_output=True, timeout=120, check=False)
    run_s = time.perf_counter() - t0
    changed = {p.name: p.read_bytes() for p in cwd.iterdir()
               if p.is_file() and (files or {}).get(p.name) != p.read_bytes()}
    return Run(res.stdout, res.stderr, res.returncode, changed, 0.0, run_s)


def run_kernel(wasm: Path, args: list[str], tmp: Path, files: dict[str, bytes] | None = None,
               stdin: bytes = b"") -> Run:
    """Run in the kernel with ``files`` in the guest's root (its working directory); collect what it wrote."""
    inputs = tmp / "in"
    out_dir = tmp / "out"
    inputs.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    for rel, data in (files or {}).items():
        (inputs / rel).write_bytes(data)
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=["prog", *args], env=ENV, dirs=[(inputs, "/")], stdin=stdin, stdout=stdout,
                        stderr=stderr, out_dir=out_dir)
    t0 = time.perf_counter()
    guest = open_guest(wasm, "kernel")
    try:
        t1 = time.perf_counter()
        code = WasiHost(guest, config).run()
        t2 = time.perf_counter()
    finally:
        guest.close()
    changed = {p.name: p.read_bytes() for p in out_dir.iterdir() if p.is_file()}
    return Run(stdout.getvalue(), stderr.getvalue(), code, changed, t1 - t0, t2 - t1)


def _report(what: str, native: Run, kernel: Run) -> None:
    print(f"\n{what}: native {native.run_s * 1e3:.1f} ms, kernel load {kernel.load_s:.2f} s + run "
          f"{kernel.run_s * 1e3:.1f} ms")


# -- the source package --------------------------------------------------------------------------------------
def test_fetched_tree_is_zlib_1_2_13_and_cached(programs: Programs) -> None:
    tree = programs.tree
    assert '#define ZLIB_VERSION "1.2.13"' in (tree / "zlib.h").read_text()
    assert (tree / fetch.STAMP).read_text().strip() == zlib.ZLIB.orig_sha256
    assert all(p.is_file() for p in zlib.library(tree))
    t0 = time.perf_counter()
    assert zlib.fetch() == tree  # the second call is a cache hit: no apt, no network
    assert time.perf_counter() - t0 < 0.5


def test_dsc_checksums_are_parsed() -> None:
    dsc = ("Format: 3.0 (quilt)\nSource: zlib\nChecksums-Sha256:\n"
           " 71fe 1239825 zlib_1.2.13.dfsg.orig.tar.bz2\n f66c 15700 zlib_1.2.13.dfsg-1.debian.tar.xz\n"
           "Files:\n ef26 1239825 zlib_1.2.13.dfsg.orig.tar.bz2\n")
    assert apt.dsc_checksums(dsc) == {"zlib_1.2.13.dfsg.orig.tar.bz2": ("71fe", 1239825),
                                             "zlib_1.2.13.dfsg-1.debian.tar.xz": ("f66c", 15700)}


def _downloads(tmp_path: Path) -> dict[str, Path]:
    """Copies of the downloaded source package (the checks below may delete a bad file)."""
    d = fetch.cache_root() / "debian" / "zlib_1.2.13.dfsg-1"
    if not d.is_dir():
        pytest.skip("the source package's downloads are not in the cache (the tree came from elsewhere)")
    out = {}
    for p in d.iterdir():
        out[p.name] = tmp_path / p.name
        out[p.name].write_bytes(p.read_bytes())
    return out


def test_pinned_checksum_is_enforced(programs: Programs, tmp_path: Path) -> None:
    files = _downloads(tmp_path)
    assert apt.verify(zlib.ZLIB, files).name == "zlib_1.2.13.dfsg.orig.tar.bz2"
    wrong_pin = apt.DebianSource("zlib", "1:1.2.13.dfsg-1", "bookworm", "0" * 64)
    with pytest.raises(fetch.FetchError, match="capsule pins"):
        apt.verify(wrong_pin, files)


def test_corrupt_download_is_refused_and_removed(programs: Programs, tmp_path: Path) -> None:
    files = _downloads(tmp_path)
    orig = files["zlib_1.2.13.dfsg.orig.tar.bz2"]
    data = bytearray(orig.read_bytes())
    data[len(data) // 2] ^= 0x40
    orig.write_bytes(bytes(data))
    with pytest.raises(fetch.FetchError, match="does not match the checksum"):
        apt.verify(zlib.ZLIB, files)
    assert not orig.exists()


def test_unreachable_archive_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSULE_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")  # the discard port: refused
    with pytest.raises(fetch.RegistryUnavailable, match="cannot reach the Debian archive"):
        zlib.fetch(tmp_path / "src")
    assert zlib.cached(tmp_path / "src") is None


# -- programs ----------------------------------------------------------------------------------------------
FLAGS_LINE = re.compile(rb"compile flags = 0x([0-9a-f]+)")


def _type_size_bits(uint: int, ulong: int, ptr: int, off: int) -> int:
    """zlibCompileFlags' low byte: two bits per type size (1: 32 bits, 2: 64 bits)."""
    code = {2: 0, 4: 1, 8: 2}
    return code[uint] | code[ulong] << 2 | code[ptr] << 4 | code[off] << 6


@pytest.mark.requires_bpf
def test_example_in_kernel_matches_native(programs: Programs, tmp_path: Path) -> None:
    native = run_native(programs.native["example"], [], tmp_path / "native")
    kernel = run_kernel(programs.wasm["example"], [], tmp_path / "kernel")
    _report("example", native, kernel)
    assert native.code == 0, native.stderr
    assert kernel.code == native.code, kernel.stderr
    assert kernel.stderr == native.stderr == b""
    # The one line that may differ: zlibCompileFlags() encodes sizeof(uLong), sizeof(void *) and
    # sizeof(z_off_t). x86-64 is LP64, wasm32 is ILP32 with a 64-bit off_t; every other flag bit is equal.
    n_flags = int(FLAGS_LINE.search(native.stdout).group(1), 16)
    k_flags = int(FLAGS_LINE.search(kernel.stdout).group(1), 16)
    assert n_flags & 0xFF == _type_size_bits(4, 8, 8, 8)
    assert k_flags & 0xFF == _type_size_bits(4, 4, 4, 8)
    assert k_flags >> 8 == n_flags >> 8
    assert FLAGS_LINE.sub(b"", kernel.stdout) == FLAGS_LINE.sub(b"", native.stdout)
    assert b"inflate with dictionary: hello, hello!" in kernel.stdout
    # example writes foo.gz with gzwrite and reads it back with gzread/gzseek/gzgets: same bytes on disk.
    assert sorted(kernel.files) == sorted(native.files) == ["foo.gz"]
    assert kernel.files["foo.gz"] == native.files["foo.gz"]
    assert pyzlib.decompress(kernel.files["foo.gz"], 31) == b"hello, hello!\0"


def _sample(size: int) -> bytes:
    """Compressible bytes that are not a short repeat: capsule's own sources, cycled."""
    root = Path(zlib.__file__).resolve().parents[1]
    text = b"".join(p.read_bytes() for p in sorted(root.rglob("*.py")))
    return (text * (size // len(text) + 1))[:size]


@pytest.mark.requires_bpf
def test_minigzip_stdin_to_stdout(programs: Programs, tmp_path: Path) -> None:
    data = _sample(1 << 20)
    native = run_native(programs.native["minigzip"], ["-9"], tmp_path / "native", stdin=data)
    kernel = run_kernel(programs.wasm["minigzip"], ["-9"], tmp_path / "kernel", stdin=data)
    _report("minigzip -9 of 1 MiB", native, kernel)
    assert (kernel.code, kernel.stderr) == (native.code, native.stderr) == (0, b"")
    assert kernel.stdout == native.stdout  # the same gzip stream, header included
    back = run_native(programs.native["minigzip"], ["-d"], tmp_path / "native-d", stdin=kernel.stdout)
    assert back.code == 0 and back.stdout == data


def _timings(stderr: bytes) -> dict[str, int]:
    return {m.group(1).decode(): int(m.group(2)) for m in re.finditer(rb"time_ns (\w+) (\d+)", stderr)}


@pytest.mark.requires_bpf
def test_round_trip_kernel_and_native(programs: Programs, tmp_path: Path) -> None:
    n = str(ROUND_TRIP_SIZE)
    native = run_native(programs.native["zround"], ["deflate", n, "6", "n.z", "inflate", n, "n.z"],
                        tmp_path / "native")
    assert native.code == 0, native.stdout + native.stderr
    kernel = run_kernel(programs.wasm["zround"], ["deflate", n, "6", "k.z", "inflate", n, "n.z"],
                        tmp_path / "kernel", files={"n.z": native.files["n.z"]})
    _report("zround deflate + inflate of 4 MiB", native, kernel)
    assert kernel.code == 0, kernel.stdout + kernel.stderr
    assert kernel.stdout == native.stdout  # sizes, CRC-32 of the data, Adler-32 of the stream, verdicts
    assert b"identical to the generated data" in kernel.stdout
    assert kernel.files["k.z"] == native.files["n.z"]  # the kernel's deflate output, bit for bit
    # Decompress the kernel's stream natively, twice: this zlib built by gcc, and the system's (Python's).
    back = run_native(programs.native["zround"], ["inflate", n, "k.z"], tmp_path / "native-back",
                      files={"k.z": kernel.files["k.z"]})
    assert back.code == 0 and b"identical to the generated data" in back.stdout
    plain = pyzlib.decompress(kernel.files["k.z"])
    assert len(plain) == ROUND_TRIP_SIZE
    assert f"crc32 {pyzlib.crc32(plain):08x}".encode() in kernel.stdout
    kt, nt = _timings(kernel.stderr), _timings(native.stderr)
    assert set(kt) == set(nt) == {"deflate", "inflate"}
    for op in ("deflate", "inflate"):
        print(f"{op} 4 MiB: kernel {kt[op] / 1e6:.1f} ms, native {nt[op] / 1e6:.1f} ms, "
              f"ratio {kt[op] / nt[op]:.2f}")
