"""The optimiser's benchmark corpus: real BPF programs fetched from Debian and built with clang-19, cached.

Where the programs come from (only the package registries are reachable, so everything is a Debian package):

- ``selftests``: the Linux kernel source package (``linux``, via ``apt-get source``), folder
  ``tools/testing/selftests/bpf/progs``: several hundred test programs of every kind, built here with clang-19
  at ``-O2`` for ``-mcpu=v2`` and ``v3`` (as the Merlin paper did), against a ``vmlinux.h`` dumped from the
  running kernel's BTF, so CO-RE offsets are already right for this kernel (capsule's loader does not apply
  CO-RE).
- ``kernel-tools``: the same package's other BPF programs: ``samples/bpf/*.bpf.c``, perf's and bpftool's BPF
  skeleton sources, HID-BPF device fixes, sched_ext schedulers.
- ``suricata``: the Suricata IDS source package's ``ebpf/*.c`` (XDP filters and load balancers, socket
  filters), built the same way.
- ``xdp-tools`` and ``libbpf-tools``: their source packages are not served by the registry here, so these are
  the objects Debian itself compiled and shipped in the binary packages (``xdp-tools``, ``libxdp1``,
  ``libbpf-tools``): loose ``.o`` files and the objects embedded in each tool's BPF skeleton (found by their ELF
  header, ``e_machine == EM_BPF``). They are real deployed code, at whatever cpu version Debian used.
- ``sysdig``: the legacy Sysdig/Falco eBPF probe (``probe.c``, fillers) from the binary package
  ``falcosecurity-scap-dkms``, built here as its own Makefile builds it against Debian's prepared kernel headers
  (``linux-headers-*``), at ``-mcpu=v2`` and ``v3``: see ``opt_corpus_sysdig``.

Nothing lands in the repository: the cache is ``$CAPSULE_OPT_CORPUS``, else ``cache_dir("opt-corpus")``
(``~/.cache/capsule/opt-corpus``; ``capsule.toolchain.cache``). Source packages are fetched with ``apt-get
source --download-only`` under a private apt configuration (``capsule.sources.apt.PrivateApt``: ``deb-src``
entries derived from the machine's own ``/etc/apt/sources.list.d/debian.sources``; nothing global changes).
Every step is resumable: a fetched file, an extracted tree or a built object (or its recorded failure, keyed by
the exact command) is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from capsule.bpf.elf_format import EM_BPF
from capsule.sources.apt import PrivateApt, Progress, Runner
from capsule.sources.fetch import FetchError
from capsule.toolchain.cache import cache_dir

__all__ = ["Suite", "CorpusObject", "Corpus", "SUITES", "CPUS", "cache_root", "build_corpus", "extract_embedded_bpf",
           "load_manifest"]

CPUS = ("v2", "v3")
CLANG = "clang-19"


def cache_root() -> Path:
    """Where the corpus lives (never inside the repository)."""
    env = os.environ.get("CAPSULE_OPT_CORPUS")
    return Path(env) if env else cache_dir("opt-corpus")


@dataclass(frozen=True)
class Suite:
    """A group of programs, like the paper's Sysdig/Tetragon/Tracee/XDP suites.

    ``package`` is a Debian source package (``kind="source"``, built here from ``globs`` under its unpacked
    orig tarball), a list of binary packages (``kind="binary"``, Debian's own objects), or a DKMS package whose
    BPF probe is built against kernel headers (``kind="probe"``, see ``opt_corpus_sysdig``).
    """

    name: str
    kind: str  # "source" | "binary" | "probe"
    packages: tuple[str, ...]
    globs: tuple[str, ...] = ()  # source: C files, relative to the tree's top folder
    members: tuple[str, ...] = ()  # source: folders to extract from the orig tarball
    includes: tuple[str, ...] = ()  # source: -I folders, relative to the tree's top folder
    defines: tuple[str, ...] = ()
    description: str = ""


_SELFTESTS = "tools/testing/selftests/bpf"
SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("selftests", "source", ("linux",), globs=(f"{_SELFTESTS}/progs/*.c",),
          members=(f"{_SELFTESTS}/", "tools/lib/bpf/", "tools/include/"),
          includes=(f"{_SELFTESTS}/progs", _SELFTESTS, "tools/include/uapi"),
          description="Linux selftests/bpf programs (Debian source package linux)"),
    Suite("kernel-tools", "source", ("linux",),
          globs=("samples/bpf/*.bpf.c", "tools/perf/util/bpf_skel/*.bpf.c", "tools/bpf/bpftool/skeleton/*.bpf.c",
                 "drivers/hid/bpf/progs/*.bpf.c", "tools/sched_ext/*.bpf.c"),
          members=("samples/bpf/", "tools/perf/util/bpf_skel/", "tools/bpf/bpftool/skeleton/", "drivers/hid/bpf/",
                   "tools/sched_ext/", "tools/lib/bpf/", "tools/include/"),
          includes=("samples/bpf", "tools/perf/util/bpf_skel", "tools/perf/util", "tools/bpf/bpftool/skeleton",
                    "tools/bpf/bpftool", "drivers/hid/bpf/progs", "tools/sched_ext/include"),
          description="Linux samples/bpf, perf and bpftool skeletons, HID-BPF, sched_ext (package linux)"),
    Suite("suricata", "source", ("suricata",), globs=("ebpf/*.c",), members=("ebpf/",),
          includes=("ebpf", "ebpf/include"), description="Suricata ebpf/ XDP and socket filters (package suricata)"),
    Suite("xdp-tools", "binary", ("xdp-tools", "libxdp1"),
          description="xdp-tools and libxdp objects as compiled by Debian (binary packages)"),
    Suite("libbpf-tools", "binary", ("libbpf-tools",),
          description="bcc's libbpf-tools as compiled by Debian (objects embedded in the tools' skeletons)"),
    Suite("sysdig", "probe", ("falcosecurity-scap-dkms",),
          description="the legacy Sysdig/Falco eBPF probe (binary package falcosecurity-scap-dkms), built with "
                      "its Makefile's flags against Debian's kernel headers"),
)}


@dataclass
class CorpusObject:
    """One object of the corpus: built (``path`` exists) or not (``reason`` says why)."""

    suite: str
    name: str  # e.g. "test_pkt_access" or "xdp-bench/0"
    cpu: str  # "v2", "v3" or "debian"
    path: str  # the object file
    ok: bool
    reason: str = ""
    source: str = ""  # the C file (source suites) or the file it was taken from (binary suites)


@dataclass
class Corpus:
    root: Path
    objects: list[CorpusObject] = field(default_factory=list)

    def built(self, suites: Iterable[str] | None = None) -> list[CorpusObject]:
        want = set(suites) if suites is not None else None
        return [o for o in self.objects if o.ok and (want is None or o.suite in want)]

    def failed(self) -> list[CorpusObject]:
        return [o for o in self.objects if not o.ok]

    def summary(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for o in self.objects:
            row = out.setdefault(o.suite, {"built": 0, "failed": 0})
            row["built" if o.ok else "failed"] += 1
        return out


# -- fetching ---------------------------------------------------------------------------------------------------
def _download_source(apt: PrivateApt, package: str, dest: Path, progress: Progress) -> Path:
    """The newest upstream (orig) tarball of a source package: fetched once, then found in ``dest``."""
    found = _orig_tarball(dest)
    if found is not None:
        return found
    # apt fails the whole command when one of the .dsc/.debian files is missing on the mirror but keeps what
    # it fetched; only the orig tarball matters here, so judge by that
    res = apt.download_source(package, dest, progress)
    found = _orig_tarball(dest)
    if found is None:
        err = res.stderr or ""
        raise FetchError(f"apt-get source {package}: no upstream tarball fetched: {err.strip()[-300:]}")
    return found


def _orig_tarball(folder: Path) -> Path | None:
    found = sorted(p for p in folder.glob("*.orig.tar.*") if not p.name.endswith(".asc"))
    return found[-1] if found else None


def extract_members(tarball: Path, dest: Path, members: Sequence[str]) -> Path:
    """Unpack only the folders ``members`` (relative to the tarball's top folder); returns that top folder.

    One streaming pass over the archive (the kernel's is 150 MB of xz), so extraction costs one decompression.
    A marker records which members are present, so a later suite needing more reads the archive again.
    """
    dest.mkdir(parents=True, exist_ok=True)
    marker = dest / ".members.json"
    have: list[str] = json.loads(marker.read_text()) if marker.exists() else []
    need = [m for m in members if m not in have]
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if not need and tops:
        return tops[0]
    with tarfile.open(tarball) as tf:
        for info in tf:
            parts = info.name.split("/", 1)
            if len(parts) < 2 or not any(parts[1].startswith(m) for m in need):
                continue
            if not (info.isfile() or info.isdir() or info.issym()):
                continue
            tf.extract(info, dest, filter="data")
    marker.write_text(json.dumps(sorted(set(have) | set(need))))
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if not tops:
        raise RuntimeError(f"{tarball.name}: none of {', '.join(members)} found")
    return tops[0]


def extract_embedded_bpf(blob: bytes) -> list[bytes]:
    """The BPF ELF objects embedded in a file (a skeleton's executable): every 64-bit little-endian ELF header
    with ``e_machine == EM_BPF``, cut at the end of its section header table (clang puts that last)."""
    out: list[bytes] = []
    start = blob.find(b"\x7fELF", 1)
    while start >= 0:
        hdr = blob[start:start + 64]
        if len(hdr) == 64 and hdr[4] == 2 and hdr[5] == 1 and int.from_bytes(hdr[18:20], "little") == EM_BPF:
            shoff = int.from_bytes(hdr[40:48], "little")
            shentsize = int.from_bytes(hdr[58:60], "little")
            shnum = int.from_bytes(hdr[60:62], "little")
            end = start + shoff + shentsize * shnum
            if shentsize == 64 and 0 < shoff and end <= len(blob):
                out.append(blob[start:end])
                start = blob.find(b"\x7fELF", end)
                continue
        start = blob.find(b"\x7fELF", start + 4)
    return out


# -- building ----------------------------------------------------------------------------------------------------
@dataclass
class _Job:
    suite: str
    name: str
    cpu: str
    src: Path
    out: Path
    cmd: list[str]
    pch: Path | None = None  # vmlinux.h precompiled with the same flags, for sources that include it


_VMLINUX_INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]vmlinux\.h[>"]', re.M)


def _pch(inc: Path, cpu: str, run: Runner) -> Path | None:
    """``vmlinux.h`` precompiled for ``cpu``: parsing its 135,000 lines is most of a compile's time."""
    out = inc / f"vmlinux-{cpu}.pch"
    cmd = [CLANG, *_BASE_FLAGS, f"-mcpu={cpu}", "-x", "c-header", str(inc / "vmlinux.h")]
    key = out.with_suffix(".key")
    want = hashlib.sha256("\0".join(cmd).encode() + (inc / "vmlinux.h").read_bytes()).hexdigest()[:16]
    if out.exists() and key.exists() and key.read_text() == want:
        return out
    r = run([*cmd, "-o", str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    key.write_text(want)
    return out


def _headers(root: Path, tree: Path | None, progress: Progress, run: Runner) -> Path:
    """``include/``: vmlinux.h of the running kernel and libbpf's headers (the tree's, helper defs from
    libbpf-dev, since the tree's are generated at build time)."""
    inc = root / "include"
    (inc / "bpf").mkdir(parents=True, exist_ok=True)
    vml = inc / "vmlinux.h"
    if not vml.exists():
        progress("bpftool btf dump: vmlinux.h of the running kernel")
        r = run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"], capture_output=True,
                text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bpftool btf dump failed: {r.stderr.strip()[-300:]}")
        tmp = vml.with_suffix(".tmp")
        tmp.write_text(r.stdout)
        tmp.replace(vml)
    libbpf = tree / "tools" / "lib" / "bpf" if tree is not None else None
    if libbpf is not None and libbpf.is_dir():
        for h in libbpf.glob("*.h"):
            if not (inc / "bpf" / h.name).exists():
                shutil.copy(h, inc / "bpf" / h.name)
    for h in Path("/usr/include/bpf").glob("*.h"):
        if not (inc / "bpf" / h.name).exists():
            shutil.copy(h, inc / "bpf" / h.name)
    return inc


_BASE_FLAGS = ("-g", "-O2", "--target=bpf", "-D__TARGET_ARCH_x86", "-mlittle-endian", "-std=gnu11",
               "-fno-strict-aliasing", "-Wno-compare-distinct-pointer-types", "-Wno-unused-value",
               "-Wno-pointer-sign", "-Wno-incompatible-pointer-types", "-DBPF_NO_KFUNC_PROTOTYPES",
               "-ferror-limit=3")


def _jobs_for(suite: Suite, tree: Path, inc: Path, out_dir: Path, cpus: Sequence[str],
              pchs: dict[str, Path | None]) -> list[_Job]:
    jobs: list[_Job] = []
    srcs = sorted({p for g in suite.globs for p in tree.glob(g)})
    for src in srcs:
        stem = src.name.removesuffix(".c").removesuffix(".bpf")
        for cpu in cpus:
            cmd = [CLANG, *_BASE_FLAGS, f"-mcpu={cpu}", f"-I{inc}"]
            cmd += [f"-I{tree / d}" for d in suite.includes]
            cmd += ["-idirafter", "/usr/include/x86_64-linux-gnu", *suite.defines, "-c", str(src)]
            pch = pchs.get(cpu) if _VMLINUX_INCLUDE.search(src.read_bytes()) else None
            jobs.append(_Job(suite.name, stem, cpu, src, out_dir / cpu / f"{stem}.o", cmd, pch))
    return jobs


def _key(cmd: Sequence[str], src: Path) -> str:
    h = hashlib.sha256("\0".join(cmd).encode())
    h.update(src.read_bytes())
    return h.hexdigest()[:16]


def _compile(job: _Job, run: Runner) -> CorpusObject:
    """Build one object unless a build (or a failure) for this exact command and source is recorded."""
    job.out.parent.mkdir(parents=True, exist_ok=True)
    stamp = job.out.with_suffix(".key")
    err = job.out.with_suffix(".err")
    key = _key(job.cmd, job.src)
    obj = CorpusObject(job.suite, job.name, job.cpu, str(job.out), True, source=str(job.src))
    if stamp.exists() and stamp.read_text() == key:
        if job.out.exists():
            return obj
        if err.exists():
            obj.ok, obj.reason = False, err.read_text()
            return obj
    tmp = job.out.with_suffix(".tmp.o")
    r = None
    if job.pch is not None:  # the precompiled header first; a source it does not suit is built plainly
        r = run([*job.cmd[:1], "-include-pch", str(job.pch), *job.cmd[1:], "-o", str(tmp)], capture_output=True,
                text=True)
    if r is None or r.returncode != 0:
        r = run([*job.cmd, "-o", str(tmp)], capture_output=True, text=True)
    if r.returncode == 0 and tmp.exists():
        tmp.replace(job.out)
        err.unlink(missing_ok=True)
    else:
        tmp.unlink(missing_ok=True)
        job.out.unlink(missing_ok=True)
        obj.ok, obj.reason = False, _first_error(r.stderr)
        err.write_text(obj.reason)
    stamp.write_text(key)
    return obj


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error:" in line:
            return re.sub(r"^\S*/", "", line.strip())[:300]
    return (stderr.strip().splitlines() or ["clang failed"])[-1][:300]


def _binary_suite(suite: Suite, apt: PrivateApt, root: Path, progress: Progress) -> list[CorpusObject]:
    """Debian's own objects: loose ``.o`` files and the objects embedded in skeleton executables."""
    out_dir = root / "build" / suite.name / "debian"
    out_dir.mkdir(parents=True, exist_ok=True)
    objs: list[CorpusObject] = []
    for pkg in suite.packages:
        try:
            tree = apt.download_binary(pkg, root / "deb" / pkg, progress)
        except FetchError as e:
            objs.append(CorpusObject(suite.name, pkg, "debian", "", False, str(e)))
            continue
        for f in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
            data = f.read_bytes()
            if data[:4] == b"\x7fELF" and len(data) > 20 and int.from_bytes(data[18:20], "little") == EM_BPF:
                blobs = [(f.stem, data)]
            elif data[:4] == b"\x7fELF":
                found = extract_embedded_bpf(data)
                blobs = [(f.name if len(found) == 1 else f"{f.name}.{k}", b) for k, b in enumerate(found)]
            else:
                continue
            for name, blob in blobs:
                dest = out_dir / f"{name}.o"
                if not dest.exists() or dest.read_bytes() != blob:
                    dest.write_bytes(blob)
                objs.append(CorpusObject(suite.name, name, "debian", str(dest), True, source=f"{pkg}:{f.name}"))
    return objs


def build_corpus(suites: Sequence[str] | None = None, root: Path | None = None, jobs: int | None = None,
                 cpus: Sequence[str] = CPUS, progress: Progress = lambda s: None,
                 apt: PrivateApt | None = None, run: Runner = subprocess.run) -> Corpus:
    """Fetch, unpack and build the named suites (default: all); resumable, and writes ``manifest.json``."""
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    apt = apt or PrivateApt(root / "apt")
    chosen = [SUITES[s] for s in (suites or list(SUITES))]
    corpus = Corpus(root)
    work: list[_Job] = []
    for suite in chosen:
        if suite.kind == "binary":
            corpus.objects += _binary_suite(suite, apt, root, progress)
            continue
        if suite.kind == "probe":
            from capsule.bench.opt_corpus_sysdig import build_probe_suite  # it imports this module

            corpus.objects += build_probe_suite(suite, apt, root, cpus, progress, run, jobs)
            continue
        try:
            tarball = _download_source(apt, suite.packages[0], root / "src" / suite.packages[0], progress)
            # one pass over the archive for every chosen suite built from the same package
            members = [m for s in chosen if s.packages[0] == suite.packages[0] for m in s.members]
            progress(f"unpacking {tarball.name}")
            tree = extract_members(tarball, root / "src" / suite.packages[0] / "tree", list(dict.fromkeys(members)))
            inc = _headers(root, tree, progress, run)
        except (FetchError, RuntimeError, OSError, tarfile.TarError) as e:
            corpus.objects.append(CorpusObject(suite.name, suite.packages[0], "-", "", False, str(e)))
            continue
        pchs = {cpu: _pch(inc, cpu, run) for cpu in cpus}
        work += _jobs_for(suite, tree, inc, root / "build" / suite.name, cpus, pchs)
    if work:
        progress(f"building {len(work)} objects with {CLANG} ({jobs or os.cpu_count()} jobs)")
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
            corpus.objects += list(pool.map(lambda j: _compile(j, run), work))
    _write_manifest(root, corpus, {s.name for s in chosen})
    return corpus


def _write_manifest(root: Path, corpus: Corpus, suites: set[str]) -> None:
    """``manifest.json``: this build's suites, and the last build's entries of every other suite (a build of one
    suite must not make the others disappear)."""
    path = root / "manifest.json"
    try:
        kept = [d for d in json.loads(path.read_text()) if d.get("suite") not in suites] if path.exists() else []
    except (OSError, ValueError):
        kept = []
    tmp = path.with_name(f"manifest.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(kept + [asdict(o) for o in corpus.objects], indent=1))
    tmp.replace(path)


def load_manifest(root: Path | None = None) -> Corpus:
    """The corpus as last built (without building anything)."""
    root = root or cache_root()
    data = json.loads((root / "manifest.json").read_text())
    return Corpus(root, [CorpusObject(**d) for d in data])
