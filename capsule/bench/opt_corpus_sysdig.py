"""The ``sysdig`` suite: the legacy Sysdig/Falco eBPF probe, built the way its own ``bpf/Makefile`` builds it.

The Merlin paper's largest result is on Sysdig. Its source tarball is not served here, but the binary package
``falcosecurity-scap-dkms`` (bookworm) ships the probe's sources under ``/usr/src/scap-*/`` for DKMS to build
against the kernel headers of the machine. That is what this suite does, with Debian's own prepared header
trees instead of an installed kernel:

- the headers are those of the release's kernel (the candidate of ``linux-headers-amd64``: bookworm's 6.1),
  i.e. the kernel this package was made for. The probe (2022) does not build against 6.2 or later: since 6.2
  ``mm_struct.rss_stat`` is an array of ``percpu_counter`` and ``fillers.h`` reads ``rss_stat.count[member]``
  (``member reference base type 'struct percpu_counter[4]' is not a structure or union``), which no define on
  the command line can repair without patching the source;
- ``clang-19 $(LINUXINCLUDE) $(KBUILD_CPPFLAGS) <the Makefile's flags> -O2 -g -emit-llvm`` once (host target:
  the kernel headers need x86's), then ``llc-19 -march=bpf -mcpu=vN -filetype=obj`` per cpu version. The
  Makefile passes no ``-mcpu``; ``v2`` and ``v3`` are the paper's. No source is patched and no compatibility
  define is needed against 6.1.

``LINUXINCLUDE`` and ``KBUILD_CPPFLAGS`` are the kernel Makefile's for an out-of-tree build (``srctree`` is the
``-common`` package's tree, ``objtree`` the flavour's). Every step is keyed by its exact command and inputs,
so the build resumes and a failure is not retried until something changes; ``build/sysdig/provenance.json``
records the packages (file, sha256), the commands and how long each took.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from capsule.bench.opt_corpus import CLANG, CorpusObject, Suite, _first_error
from capsule.sources.apt import PrivateApt, Progress, Runner
from capsule.sources.fetch import FetchError, sha256_file

__all__ = ["PROBE_PACKAGE", "HEADERS_META", "LLC", "PROBE_FLAGS", "KernelHeaders", "depends_on", "ir_command",
           "llc_command", "build_probe_suite"]

PROBE_PACKAGE = "falcosecurity-scap-dkms"
HEADERS_META = "linux-headers-amd64"  # its candidate depends on the release kernel's flavour headers
LLC = "llc-19"
# the probe's bpf/Makefile, in its order (its $(DEBUG) is empty by default)
PROBE_FLAGS = ("-D__KERNEL__", "-D__BPF_TRACING__", "-Wno-gnu-variable-sized-type-not-at-end",
               "-Wno-address-of-packed-member", "-fno-jump-tables", "-fno-stack-protector",
               "-Wno-tautological-compare", "-O2", "-g")


@dataclass(frozen=True)
class KernelHeaders:
    """A prepared kernel header tree split as Debian ships it: ``srctree`` (``linux-headers-*-common``) and
    ``objtree`` (``linux-headers-*-amd64``: ``.config``, ``include/generated``, generated asm headers)."""

    srctree: Path
    objtree: Path
    arch: str = "x86"

    def linuxinclude(self) -> list[str]:
        """The kernel Makefile's ``LINUXINCLUDE`` (with its ``USERINCLUDE``) when building out of srctree."""
        s, o, a = self.srctree, self.objtree, self.arch
        return [f"-I{s}/arch/{a}/include", f"-I{o}/arch/{a}/include/generated", f"-I{s}/include", f"-I{o}/include",
                f"-I{s}/arch/{a}/include/uapi", f"-I{o}/arch/{a}/include/generated/uapi", f"-I{s}/include/uapi",
                f"-I{o}/include/generated/uapi", "-include", f"{s}/include/linux/compiler-version.h",
                "-include", f"{s}/include/linux/kconfig.h"]

    def cppflags(self) -> list[str]:
        """``KBUILD_CPPFLAGS`` of a kernel built with gcc (Debian's): clang's ``-Qunused-arguments`` is not in."""
        return ["-D__KERNEL__", f"-fmacro-prefix-map={self.srctree}/="]


def depends_on(show: str, suffix: str) -> str:
    """The first package in the ``Depends:`` of ``apt-cache show`` output whose name ends with ``suffix``."""
    m = re.search(r"^Depends:\s*(.*)$", show, re.M)
    for alt in (m.group(1).split(",") if m else []):
        name = alt.split("|")[0].split("(")[0].strip()
        if name.endswith(suffix):
            return name
    raise RuntimeError(f"no dependency ending in {suffix!r} in: {m.group(0) if m else show.strip()[:200]}")


def ir_command(probe_dir: Path, headers: KernelHeaders, out: Path) -> list[str]:
    """The Makefile's clang step (``-emit-llvm``, host target: the headers are x86's)."""
    return [CLANG, *headers.linuxinclude(), *headers.cppflags(), *PROBE_FLAGS, "-emit-llvm", "-c",
            str(probe_dir / "probe.c"), "-o", str(out)]


def llc_command(ir: Path, cpu: str, out: Path) -> list[str]:
    """The Makefile's llc step, for one cpu version."""
    return [LLC, "-march=bpf", f"-mcpu={cpu}", "-filetype=obj", "-o", str(out), str(ir)]


def _resolve_headers(apt: PrivateApt, root: Path, progress: Progress) -> tuple[str, str]:
    """(flavour package, common package) of the release kernel's headers, resolved once and remembered."""
    memo = root / "deb" / "sysdig-headers.json"
    if memo.exists():
        flavour, common = json.loads(memo.read_text())
        return flavour, common
    progress(f"apt-cache show {HEADERS_META}")

    def show(pkg: str) -> str:
        r = apt.run(["apt-cache", "show", "--no-all-versions", pkg], cwd=None, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"apt-cache show {pkg} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
        return r.stdout

    flavour = depends_on(show(HEADERS_META), "-amd64")
    common = depends_on(show(flavour), "-common")
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(json.dumps([flavour, common]))
    return flavour, common


def _fetch(apt: PrivateApt, root: Path, progress: Progress) -> tuple[Path, KernelHeaders, list[dict[str, str]]]:
    """The probe's folder, the header trees, and what was fetched (package, .deb file, sha256)."""
    flavour, common = _resolve_headers(apt, root, progress)
    trees: dict[str, Path] = {}
    fetched: list[dict[str, str]] = []
    for pkg in (PROBE_PACKAGE, flavour, common):
        trees[pkg] = apt.download_binary(pkg, root / "deb" / pkg, progress)
        debs = sorted((root / "deb" / pkg).glob(f"{pkg}_*.deb"))
        fetched.append({"package": pkg, "file": debs[-1].name if debs else "",
                        "sha256": sha256_file(debs[-1]) if debs else ""})
    probes = sorted(trees[PROBE_PACKAGE].glob("usr/src/scap-*/bpf/probe.c"))
    if not probes:
        raise RuntimeError(f"{PROBE_PACKAGE}: no usr/src/scap-*/bpf/probe.c in the package")
    headers = KernelHeaders(trees[common] / "usr" / "src" / common, trees[flavour] / "usr" / "src" / flavour)
    for d in (headers.srctree, headers.objtree):
        if not d.is_dir():
            raise RuntimeError(f"kernel headers: {d} missing from the unpacked package")
    return probes[-1].parent, headers, fetched


def _step(cmd: list[str], out: Path, inputs: Sequence[Path], run: Runner) -> tuple[str, float, bool]:
    """Run ``cmd`` (which writes ``out``) unless this exact command on these inputs already ran; returns (error
    or "", seconds, cached). A temporary output is renamed into place only on success."""
    h = hashlib.sha256("\0".join(cmd).encode())
    for p in inputs:
        h.update(p.read_bytes())
    key = h.hexdigest()[:16]
    stamp, err = Path(f"{out}.key"), Path(f"{out}.err")
    if stamp.exists() and stamp.read_text() == key:
        if out.exists():
            return "", 0.0, True
        if err.exists():
            return err.read_text(), 0.0, True
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp")
    t0 = time.perf_counter()
    r = run([str(tmp) if c == str(out) else c for c in cmd], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    reason = ""
    if r.returncode == 0 and tmp.exists():
        tmp.replace(out)
        err.unlink(missing_ok=True)
    else:
        tmp.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
        reason = _first_error(r.stderr or "")
        err.write_text(reason)
    stamp.write_text(key)
    return reason, seconds, False


def build_probe_suite(suite: Suite, apt: PrivateApt, root: Path, cpus: Sequence[str], progress: Progress,
                      run: Runner, jobs: int | None = None) -> list[CorpusObject]:
    """Fetch the probe and the headers, build ``probe.o`` per cpu version; one CorpusObject per cpu."""
    out_dir = root / "build" / suite.name
    try:
        probe_dir, headers, fetched = _fetch(apt, root, progress)
    except (FetchError, RuntimeError, OSError) as e:
        return [CorpusObject(suite.name, "probe", "-", "", False, str(e))]
    source = f"{fetched[0]['file']}:{probe_dir.relative_to(root / 'deb' / PROBE_PACKAGE / 'tree')}/probe.c"
    sources = sorted(p for p in probe_dir.parent.rglob("*") if p.is_file() and p.suffix in (".c", ".h"))
    ir = out_dir / "probe.bc"
    steps: list[dict[str, object]] = []

    prov = out_dir / "provenance.json"
    # a cached step keeps the time it took when it ran
    before = {tuple(s["cmd"]): s["seconds"] for s in json.loads(prov.read_text())["steps"]} if prov.exists() else {}

    def record(cmd: list[str], reason: str, seconds: float, cached: bool) -> None:
        took = before.get(tuple(cmd), 0.0) if cached else round(seconds, 2)
        steps.append({"cmd": cmd, "seconds": took, "cached": cached, "error": reason})

    ir_cmd = ir_command(probe_dir, headers, ir)
    if not (out_dir / "probe.bc.key").exists():
        progress(f"{CLANG} -emit-llvm {source}")
    reason, seconds, cached = _step(ir_cmd, ir, sources, run)
    record(ir_cmd, reason, seconds, cached)
    objs: list[CorpusObject] = []
    if reason:
        objs = [CorpusObject(suite.name, "probe", cpu, str(out_dir / cpu / "probe.o"), False, reason, source)
                for cpu in cpus]
    else:
        def one(cpu: str) -> tuple[CorpusObject, list[str], tuple[str, float, bool]]:
            out = out_dir / cpu / "probe.o"
            cmd = llc_command(ir, cpu, out)
            res = _step(cmd, out, [ir], run)
            return CorpusObject(suite.name, "probe", cpu, str(out), not res[0], res[0], source), cmd, res

        if not all((out_dir / cpu / "probe.o").exists() for cpu in cpus):
            progress(f"{LLC} -march=bpf for {', '.join(cpus)}")
        with ThreadPoolExecutor(max_workers=max(1, min(jobs or len(cpus), len(cpus)))) as pool:
            for obj, cmd, res in pool.map(one, cpus):
                objs.append(obj)
                record(cmd, *res)
    out_dir.mkdir(parents=True, exist_ok=True)
    prov.write_text(json.dumps({"packages": fetched, "steps": steps}, indent=1))
    return objs
