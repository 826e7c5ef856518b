"""QuickJS 2021-03-27 (the ``quickjs`` sdist's ``upstream-quickjs/``) with capsule's ``qjs`` front end, built from
the same sources natively and for capsule.

``quickjs/features.js`` exercises closures, classes (private fields, statics, inheritance), generators and
iterators, Promise jobs and async functions, JSON round trips, regular expressions (named groups, lookbehind,
Unicode properties), Array.sort with comparators, typed arrays and DataView, BigInt, string methods and
number formatting, and thrown and caught exceptions; ``quickjs/uncaught.js`` ends with an exception nobody
catches. The guest must print exactly what the native build prints, on stdout and stderr (the message and
QuickJS's stack), and exit with the same status (0, then 1).

The kernel variant is slow: QuickJS is compiled to BPF split across several programs and loaded, which takes
about two minutes per run on this machine.
"""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

import pytest

from capsule.sources import fetch, pypi, quickjs
from tests.thirdparty.conftest import kernel_param
from tests.thirdparty.runs import guest, native, same

HERE = Path(__file__).resolve().parent / "quickjs"
SCRIPTS = {name: (HERE / name).read_bytes() for name in ("features.js", "uncaught.js")}
ENV = {"LANG": "C"}
ENGINES = ["wasmtime", kernel_param()]


@pytest.fixture(scope="module")
def qjs() -> tuple[Path, Path, Path]:
    """(tree, native qjs, guest module)."""
    try:
        tree = quickjs.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"QuickJS is not cached and PyPI cannot be reached: {e}")
    return tree, quickjs.build_native(tree), quickjs.build_wasm(tree)


def test_fetched_tree_is_quickjs_2021_03_27(qjs: tuple[Path, Path, Path]) -> None:
    tree = qjs[0]
    assert (tree / "VERSION").read_text().strip() == "2021-03-27"
    assert (tree / fetch.STAMP).read_text().strip() == quickjs.SDIST_SHA256
    assert {p.name for p in tree.iterdir()} >= {"quickjs.c", "quickjs.h", "libregexp.c", "libbf.c", "cutils.h"}
    assert not any(p.name in ("setup.py", "module.c") for p in tree.iterdir())  # the engine only
    t0 = time.perf_counter()
    assert quickjs.fetch() == tree
    assert time.perf_counter() - t0 < 0.5


def test_wrong_sdist_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(HERE / "features.js", f"{quickjs.SDIST_DIR}/quickjs.c")
    monkeypatch.setattr(pypi, "sdist_url", lambda project, name: (fake.as_uri(), ""))
    with pytest.raises(fetch.FetchError, match="capsule pins"):
        quickjs.fetch(tmp_path / "src")
    assert quickjs.cached(tmp_path / "src") is None
    assert list((tmp_path / "src" / "pypi").iterdir()) == []


def test_native_reference(qjs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    ok = native(qjs[1], ["qjs", "features.js"], cwd=tmp_path / "a", env=ENV, files=SCRIPTS)
    assert ok.code == 0 and ok.stderr == b""
    out = ok.stdout.decode()
    for section in ("closures", "classes", "generators and iterators", "promises", "JSON", "regular expressions",
                    "sort", "typed arrays", "strings", "exceptions"):
        assert f"== {section}\n" in out
    assert out.endswith("end of script\nasync start; sync end; then 1; caught nope; then 2; all 1+2+3; "
                        "rejected/fulfilled; race fast; await caught RangeError\n")  # the jobs ran after the script
    bad = native(qjs[1], ["qjs", "uncaught.js"], cwd=tmp_path / "b", env=ENV, files=SCRIPTS)
    assert bad.code == 1 and bad.stdout == b"== uncaught\nabout to throw\n"
    assert bad.stderr.startswith(b"TypeError: this exception is not caught\n    at fail (uncaught.js")


@pytest.mark.parametrize("script", ["features.js", "uncaught.js"])
@pytest.mark.parametrize("engine", ENGINES)
def test_script_matches_native(engine: str, script: str, qjs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, exe, wasm = qjs
    ref = native(exe, ["qjs", script], cwd=tmp_path / "native", env=ENV, files=SCRIPTS)
    got = guest(wasm, ["qjs", script], engine=engine, tmp=tmp_path, env=ENV, files=SCRIPTS)
    print(f"\nqjs {script}: native {ref.seconds * 1e3:.0f} ms, {engine} {got.seconds * 1e3:.0f} ms "
          f"(+{got.load_seconds:.1f} s to load)")
    same(ref, got)
