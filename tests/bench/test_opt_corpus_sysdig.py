"""The ``sysdig`` suite's builder (``capsule.bench.opt_corpus_sysdig``) without network: apt is faked with local
.deb files laid out like Debian's (the DKMS probe package, the flavour and ``-common`` kernel headers); dpkg-deb,
clang-19 and llc-19 run for real on a small probe that checks it gets the kernel build's include paths and
defines."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from capsule.bench import opt_corpus
from capsule.bench.opt_corpus import EM_BPF, build_corpus
from capsule.bench.opt_corpus_sysdig import (
    PROBE_FLAGS,
    PROBE_PACKAGE,
    KernelHeaders,
    depends_on,
    ir_command,
    llc_command,
)
from capsule.bpf.elf import read_object
from capsule.cli.bench import add_parsers
from capsule.sources.apt import PrivateApt

FLAVOUR, COMMON = "linux-headers-9.9.0-1-amd64", "linux-headers-9.9.0-1-common"

# every #error below fails the build if the command line is not the kernel build's
PROBE = """\
#include "../driver_config.h"
#include <generated/utsrelease.h>
#include <linux/types.h>
#include <asm/fake_arch.h>
#ifndef __KERNEL__
#error no __KERNEL__
#endif
#ifndef __BPF_TRACING__
#error no __BPF_TRACING__
#endif
#ifndef CONFIG_FAKE
#error kconfig.h (and through it autoconf.h) was not force-included
#endif
__attribute__((section("raw_tracepoint/sys_enter"), used))
int bpf_sys_enter(void *ctx) { return FAKE_ARCH + (int)sizeof(UTS_RELEASE) + DRIVER_VALUE; }
char __license[] __attribute__((section("license"), used)) = "GPL";
"""


def _deb(tmp: Path, pkg: str, files: dict[str, str]) -> Path:
    root = tmp / f"{pkg}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: {pkg}\nVersion: 1.0\nArchitecture: all\n"
                                             "Maintainer: t <t@t>\nDescription: t\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    deb = tmp / f"{pkg}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--build", "-Zgzip", str(root), str(deb)], check=True, capture_output=True)
    return deb


@pytest.fixture
def debs(tmp_path: Path) -> dict[str, Path]:
    scap = "usr/src/scap-1.0"
    s, o = f"usr/src/{COMMON}", f"usr/src/{FLAVOUR}"
    return {
        PROBE_PACKAGE: _deb(tmp_path, PROBE_PACKAGE, {f"{scap}/bpf/probe.c": PROBE, f"{scap}/bpf/Makefile": "",
                                                      f"{scap}/driver_config.h": "#define DRIVER_VALUE 3\n"}),
        COMMON: _deb(tmp_path, COMMON, {f"{s}/include/linux/kconfig.h": "#include <generated/autoconf.h>\n",
                                        f"{s}/include/linux/compiler-version.h": "/* */\n",
                                        f"{s}/include/uapi/linux/types.h": "typedef int __s32;\n",
                                        f"{s}/arch/x86/include/asm/fake_arch.h": "#define FAKE_ARCH 1\n"}),
        FLAVOUR: _deb(tmp_path, FLAVOUR, {f"{o}/include/generated/autoconf.h": "#define CONFIG_FAKE 1\n",
                                          f"{o}/include/generated/utsrelease.h": '#define UTS_RELEASE "9.9.0"\n'}),
    }


SHOW = {"linux-headers-amd64": f"Package: linux-headers-amd64\nDepends: {FLAVOUR} (= 9.9-1)\n",
        FLAVOUR: f"Package: {FLAVOUR}\nDepends: {COMMON} (= 9.9-1), linux-kbuild-9.9 (>= 9.9-1), gcc-12\n"}


def _fake_apt(debs: dict[str, Path], calls: list[list[str]]):
    def run(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        calls.append(list(cmd))
        if cmd[:2] == ["apt-cache", "show"]:
            return subprocess.CompletedProcess(cmd, 0, SHOW[cmd[-1]], "")
        if cmd[:2] == ["apt-get", "download"]:
            deb = debs[cmd[-1]]
            (Path(cwd) / deb.name).write_bytes(deb.read_bytes())
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.run(cmd, cwd=cwd, **kw)  # dpkg-deb, clang-19 and llc-19 for real
    return run


def test_depends_on_takes_the_named_dependency() -> None:
    assert depends_on(SHOW[FLAVOUR], "-common") == COMMON
    assert depends_on("Depends: a | linux-headers-1-amd64 (= 1), linux-headers-2-amd64\n", "-amd64") == \
        "linux-headers-2-amd64"  # only an alternative's first package counts
    with pytest.raises(RuntimeError, match="-common"):
        depends_on("Package: x\n", "-common")


def test_commands_are_the_makefiles() -> None:
    h = KernelHeaders(Path("/s"), Path("/o"))
    ir = ir_command(Path("/p/bpf"), h, Path("/b/probe.bc"))
    assert ir[0] == "clang-19" and ir[-4:] == ["-c", "/p/bpf/probe.c", "-o", "/b/probe.bc"]
    # LINUXINCLUDE for an out-of-tree build: arch before generic, srctree before objtree, then the forced includes
    assert ir[1:9] == ["-I/s/arch/x86/include", "-I/o/arch/x86/include/generated", "-I/s/include", "-I/o/include",
                       "-I/s/arch/x86/include/uapi", "-I/o/arch/x86/include/generated/uapi", "-I/s/include/uapi",
                       "-I/o/include/generated/uapi"]
    assert ir[9:13] == ["-include", "/s/include/linux/compiler-version.h", "-include", "/s/include/linux/kconfig.h"]
    flags = ir[13:-4]
    assert flags[:2] == ["-D__KERNEL__", "-fmacro-prefix-map=/s/="]  # KBUILD_CPPFLAGS
    assert tuple(flags[2:-1]) == PROBE_FLAGS and flags[-1] == "-emit-llvm"
    assert not [f for f in ir if f.startswith(("--target", "-target", "-mcpu"))]  # host target, cpu at llc
    assert llc_command(Path("/b/probe.bc"), "v3", Path("/b/v3/probe.o")) == \
        ["llc-19", "-march=bpf", "-mcpu=v3", "-filetype=obj", "-o", "/b/v3/probe.o", "/b/probe.bc"]


def test_suite_registered_and_selectable() -> None:
    assert opt_corpus.SUITES["sysdig"].kind == "probe"
    assert opt_corpus.SUITES["sysdig"].packages == (PROBE_PACKAGE,)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    add_parsers(sub)
    args = parser.parse_args(["bench", "opt", "--suite", "sysdig", "--no-check"])
    assert args.suite == ["sysdig"]


def test_probe_built_with_fake_apt_and_resumed(tmp_path: Path, debs: dict[str, Path]) -> None:
    calls: list[list[str]] = []
    run = _fake_apt(debs, calls)
    root = tmp_path / "cache"
    apt = PrivateApt(root / "apt", run=run)
    corpus = build_corpus(["sysdig"], root=root, cpus=("v2", "v3"), apt=apt, run=run)
    assert corpus.summary() == {"sysdig": {"built": 2, "failed": 0}}, corpus.failed()
    for obj, cpu in zip(corpus.built(), ("v2", "v3"), strict=True):
        data = Path(obj.path).read_bytes()
        assert obj.name == "probe" and obj.cpu == cpu and int.from_bytes(data[18:20], "little") == EM_BPF
        assert obj.source == f"{PROBE_PACKAGE}_1.0_all.deb:usr/src/scap-1.0/bpf/probe.c"
        prog = read_object(Path(obj.path)).programs["bpf_sys_enter"]
        assert prog.section == "raw_tracepoint/sys_enter"
    llcs = [c for c in calls if c[0] == "llc-19"]
    assert sorted(c[2] for c in llcs) == ["-mcpu=v2", "-mcpu=v3"]
    assert len([c for c in calls if c[0] == "clang-19"]) == 1  # one IR for both cpu versions
    prov = json.loads((root / "build" / "sysdig" / "provenance.json").read_text())
    assert [p["package"] for p in prov["packages"]] == [PROBE_PACKAGE, FLAVOUR, COMMON]
    assert all(len(p["sha256"]) == 64 for p in prov["packages"])
    assert [s["cmd"][0] for s in prov["steps"]] == ["clang-19", "llc-19", "llc-19"]
    assert all(s["seconds"] > 0 and not s["cached"] for s in prov["steps"])
    assert opt_corpus.load_manifest(root).summary() == corpus.summary()

    calls.clear()
    again = build_corpus(["sysdig"], root=root, cpus=("v2", "v3"), apt=apt, run=run)
    assert again.summary() == corpus.summary()
    assert not calls, "a cached build must not resolve, fetch or compile"
    prov2 = json.loads((root / "build" / "sysdig" / "provenance.json").read_text())
    assert all(s["cached"] for s in prov2["steps"])
    assert [s["seconds"] for s in prov2["steps"]] == [s["seconds"] for s in prov["steps"]]  # kept from the run


def test_probe_failure_recorded_and_not_retried(tmp_path: Path) -> None:
    scap = "usr/src/scap-1.0"
    s, o = f"usr/src/{COMMON}", f"usr/src/{FLAVOUR}"
    debs = {PROBE_PACKAGE: _deb(tmp_path, PROBE_PACKAGE, {f"{scap}/bpf/probe.c": "int x = ;\n"}),
            COMMON: _deb(tmp_path, COMMON, {f"{s}/include/linux/kconfig.h": "", f"{s}/include/linux/"
                                            "compiler-version.h": ""}),
            FLAVOUR: _deb(tmp_path, FLAVOUR, {f"{o}/include/generated/autoconf.h": ""})}
    calls: list[list[str]] = []
    run = _fake_apt(debs, calls)
    root = tmp_path / "cache"
    corpus = build_corpus(["sysdig"], root=root, cpus=("v2", "v3"), apt=PrivateApt(root / "apt", run=run), run=run)
    assert corpus.summary() == {"sysdig": {"built": 0, "failed": 2}}
    assert all("error:" in o.reason and o.cpu in ("v2", "v3") for o in corpus.failed())
    assert not [c for c in calls if c[0] == "llc-19"]
    calls.clear()
    again = build_corpus(["sysdig"], root=root, cpus=("v2", "v3"), apt=PrivateApt(root / "apt", run=run), run=run)
    assert [o.reason for o in again.failed()] == [o.reason for o in corpus.failed()]
    assert not calls


def test_missing_headers_dependency_is_a_recorded_failure(tmp_path: Path, debs: dict[str, Path]) -> None:
    calls: list[list[str]] = []
    run = _fake_apt(debs, calls)

    def no_common(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        if cmd[:2] == ["apt-cache", "show"] and cmd[-1] == FLAVOUR:
            return subprocess.CompletedProcess(cmd, 0, f"Package: {FLAVOUR}\nDepends: gcc-12\n", "")
        return run(cmd, cwd=cwd, **kw)

    root = tmp_path / "cache"
    corpus = build_corpus(["sysdig"], root=root, apt=PrivateApt(root / "apt", run=no_common), run=no_common)
    (bad,) = corpus.failed()
    assert bad.suite == "sysdig" and "-common" in bad.reason
