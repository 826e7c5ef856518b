"""``capsule bench opt`` on a tiny local corpus (tests/corpus, compiled by tests/clang.py: no network), and the
corpus builder's fetch/unpack/build/resume logic against fakes of apt (local tarballs and a local .deb)."""

from __future__ import annotations

import argparse
import csv
import io
import lzma
import subprocess
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from capsule.bench import opt_corpus
from capsule.bench.opt import measure_object
from capsule.bench.opt_corpus import Suite, build_corpus, extract_embedded_bpf, extract_members
from capsule.bpf.elf import read_object
from capsule.cli.bench import add_parsers
from capsule.opt.passes import DEFAULT_PASSES
from capsule.sources.apt import PrivateApt
from tests.clang import CORPUS, compile_bpf
from tests.fds import open_fds

LOCAL = ["xdp_parse", "unaligned", "tc_switch", "socket_ldabs", "subprogs", "maps_ringbuf"]

NOT_LOADABLE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
SEC("fentry/do_nanosleep")
int on_sleep(void *ctx) { return 0; }
"""


def _run_cli(argv: list[str]) -> tuple[int, str]:
    ap = argparse.ArgumentParser()
    add_parsers(ap.add_subparsers())
    args = ap.parse_args(argv)
    buf = io.StringIO()
    rc = args.func(args, Console(file=buf, width=260, color_system=None))
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def local_objects() -> list[str]:
    return [str(compile_bpf(CORPUS / f"{n}.c", mcpu="v3")) for n in LOCAL]


@pytest.fixture(scope="module")
def bench_run(local_objects: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    before = open_fds(kernel_only=True)
    rc, text = _run_cli(["bench", "opt", "--objects", *local_objects, "--csv", str(out / "o.csv"),
                         "--plot", str(out / "o.png")])
    after = open_fds(kernel_only=True)
    return {"rc": rc, "text": text, "csv": out / "o.csv", "png": out / "o.png", "fds": (before, after)}


@pytest.mark.requires_bpf
def test_table_csv_plot_produced(bench_run: dict) -> None:
    assert bench_run["rc"] == 0
    text = bench_run["text"]
    assert "capsule bench opt" in text and "local" in text
    assert "per-pass contribution" in text and all(p in text for p in DEFAULT_PASSES)
    assert "59.8%" in text and "17.1%" in text and "25.4%" in text  # the paper beside ours
    assert "verified before but not after: 0" in text
    png = bench_run["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    before, after = bench_run["fds"]
    assert after == before, "the benchmark leaked file descriptors"


@pytest.mark.requires_bpf
def test_csv_consistent(bench_run: dict) -> None:
    rows = list(csv.DictReader(bench_run["csv"].open()))
    assert len(rows) >= len(LOCAL)
    assert {r["object"].split("-")[0] for r in rows} == set(LOCAL)
    for r in rows:
        assert int(r["ni_after"]) <= int(r["ni_before"]), r
        assert r["loadable"] == "True", r  # every local program loads on this kernel
        assert int(r["npi_before"]) > 0 and int(r["npi_after"]) > 0
        assert int(r["jited_before"]) > 0 and int(r["jited_after"]) > 0
        assert float(r["opt_seconds"]) >= 0
        for p in DEFAULT_PASSES:
            assert int(r[f"pass:{p}"]) >= 0
        assert float(r["ni_pct"]) == pytest.approx(
            100 * (int(r["ni_before"]) - int(r["ni_after"])) / int(r["ni_before"]), abs=1e-3)
    assert sum(int(r["ni_before"]) - int(r["ni_after"]) for r in rows) > 0, "the optimiser saved nothing at all"


@pytest.mark.requires_bpf
def test_not_loadable_measured_on_ni_only() -> None:
    spec = read_object(compile_bpf(NOT_LOADABLE, mcpu="v3"))
    before = open_fds(kernel_only=True)
    rows = measure_object(spec, "t", "fentry", "v3", ["constprop", "peephole"], check=True)
    assert open_fds(kernel_only=True) == before
    (row,) = rows
    assert not row.loadable and row.status.startswith("not loadable")
    assert row.npi_before is None and row.ni_after <= row.ni_before
    assert set(row.per_pass) == {"constprop", "peephole"}


def test_no_check_is_ni_only(local_objects: list[str], tmp_path: Path) -> None:
    rc, text = _run_cli(["bench", "opt", "--no-check", "--no-per-pass", "--passes", "align,constprop",
                         "--objects", local_objects[0], "--csv", str(tmp_path / "n.csv")])
    assert rc == 0 and "not checked" in text
    rows = list(csv.DictReader((tmp_path / "n.csv").open()))
    assert rows and all(r["npi_before"] == "" and r["loadable"] == "False" for r in rows)


def test_unknown_pass_refused(local_objects: list[str]) -> None:
    with pytest.raises(SystemExit, match="unknown pass"):
        _run_cli(["bench", "opt", "--no-check", "--passes", "nosuch", "--objects", local_objects[0]])


# -- the corpus builder, against fakes ---------------------------------------------------------------------------
def test_deb_src_lines_derived_from_system_sources(tmp_path: Path) -> None:
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
                   "Components: main\nSigned-By: /k.gpg\n\nTypes: deb\nURIs: http://mirror.example/debian-security\n"
                   "Suites: bookworm-security\nComponents: main\n")
    text = PrivateApt(tmp_path / "apt", system_sources=src).sources_text()
    assert "Types: deb-src" in text and "security" not in text
    assert "Suites: bookworm bookworm-updates bookworm-backports" in text and "Signed-By: /k.gpg" in text
    opts = PrivateApt(tmp_path / "apt", system_sources=src).options()
    assert f"Dir::State::Lists={tmp_path / 'apt' / 'lists'}" in opts  # private: nothing global changes


def test_extract_embedded_bpf_finds_objects_in_a_binary() -> None:
    obj = compile_bpf(CORPUS / "xdp_parse.c", mcpu="v3").read_bytes()
    host = Path("/bin/true").read_bytes()  # an x86-64 ELF: its own header must not be taken
    blob = host[:5000] + obj + b"\0" * 100 + obj + host[5000:9000]
    found = extract_embedded_bpf(blob)
    assert found == [obj, obj]
    assert read_object(found[0]).programs


def _xz_tarball(path: Path, files: dict[str, str]) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    path.write_bytes(lzma.compress(raw.getvalue()))


GOOD = (CORPUS / "xdp_parse.c").read_text()


def test_build_corpus_with_fake_apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apt-get is faked (it 'downloads' a local orig tarball and, like the real mirror sometimes, fails on the
    .dsc); unpacking, building, failure records, the manifest and resuming are real."""
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        calls.append(list(cmd))
        if cmd[0] == "apt-get":
            if "update" in cmd:
                return subprocess.CompletedProcess(cmd, 0, "", "")
            _xz_tarball(Path(cwd) / "fakepkg_1.0.orig.tar.xz",
                        {"fakepkg-1.0/ebpf/good.c": GOOD, "fakepkg-1.0/ebpf/bad.c": "int x = ;\n",
                         "fakepkg-1.0/other/skip.c": "not extracted"})
            return subprocess.CompletedProcess(cmd, 100, "", "E: Failed to fetch fakepkg_1.0-1.dsc 404 Not Found")
        return subprocess.run(cmd, cwd=cwd, **kw)  # clang and bpftool for real

    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n")
    monkeypatch.setitem(opt_corpus.SUITES, "fake", Suite("fake", "source", ("fakepkg",), globs=("ebpf/*.c",),
                                                          members=("ebpf/",), includes=("ebpf",)))
    apt = PrivateApt(tmp_path / "apt", system_sources=sources, run=fake_run)
    corpus = build_corpus(["fake"], root=tmp_path, cpus=("v3",), apt=apt, run=fake_run)
    assert corpus.summary() == {"fake": {"built": 1, "failed": 1}}
    (good,) = corpus.built()
    assert good.name == "good" and good.cpu == "v3" and read_object(Path(good.path)).programs
    (bad,) = corpus.failed()
    assert bad.name == "bad" and "error:" in bad.reason
    assert not list(tmp_path.rglob("skip.c"))
    assert (tmp_path / "manifest.json").exists() and opt_corpus.load_manifest(tmp_path).summary() == corpus.summary()

    calls.clear()
    again = build_corpus(["fake"], root=tmp_path, cpus=("v3",), apt=apt, run=fake_run)
    assert again.summary() == corpus.summary()
    assert not [c for c in calls if c[0] in ("apt-get", "clang-19")], "a cached build must not fetch or compile"


def test_binary_suite_with_fake_apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    obj = compile_bpf(CORPUS / "xdp_parse.c", mcpu="v3").read_bytes()
    pkg = tmp_path / "pkgroot"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text("Package: fakebin\nVersion: 1.0\nArchitecture: all\n"
                                            "Maintainer: t <t@t>\nDescription: t\n")
    (pkg / "usr" / "lib" / "bpf").mkdir(parents=True)
    (pkg / "usr" / "lib" / "bpf" / "loose.o").write_bytes(obj)
    (pkg / "usr" / "sbin").mkdir(parents=True)
    host = Path("/bin/true").read_bytes()
    (pkg / "usr" / "sbin" / "tool").write_bytes(host + obj)  # a 'skeleton' executable
    deb = tmp_path / "fakebin_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--build", "-Zgzip", str(pkg), str(deb)], check=True, capture_output=True)

    def fake_run(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        if cmd[:2] == ["apt-get", "download"]:
            (Path(cwd) / deb.name).write_bytes(deb.read_bytes())
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.run(cmd, cwd=cwd, **kw)

    monkeypatch.setitem(opt_corpus.SUITES, "fakebin", Suite("fakebin", "binary", ("fakebin",)))
    apt = PrivateApt(tmp_path / "apt", run=fake_run)
    corpus = build_corpus(["fakebin"], root=tmp_path / "c", apt=apt, run=fake_run)
    assert sorted(o.name for o in corpus.built()) == ["loose", "tool"]
    assert all(Path(o.path).read_bytes() == obj and o.cpu == "debian" for o in corpus.built())


def test_extract_members_only_and_resumes(tmp_path: Path) -> None:
    tb = tmp_path / "p_1.orig.tar.xz"
    _xz_tarball(tb, {"p-1/a/x.c": "x", "p-1/b/y.c": "y"})
    top = extract_members(tb, tmp_path / "t", ["a/"])
    assert (top / "a" / "x.c").exists() and not (top / "b").exists()
    top = extract_members(tb, tmp_path / "t", ["a/", "b/"])  # a later suite needing more reads it again
    assert (top / "b" / "y.c").read_text() == "y"


def test_as_loaded_sizes_run_time_maps_but_not_local_storage() -> None:
    from capsule.bench.opt import as_loaded, possible_cpus
    from capsule.bpf.spec import MapSpec, ObjectSpec
    from capsule.kernel.consts import MapType

    spec = ObjectSpec(maps={"counters": MapSpec("counters", MapType.PERCPU_ARRAY, 4, 8, 0),
                            "sk": MapSpec("sk", MapType.SK_STORAGE, 4, 8, 0),
                            "fixed": MapSpec("fixed", MapType.HASH, 4, 8, 16)})
    out = as_loaded(spec).maps
    assert out["counters"].max_entries == possible_cpus()
    assert out["sk"].max_entries == 0 and out["fixed"].max_entries == 16
