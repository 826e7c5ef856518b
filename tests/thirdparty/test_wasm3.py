"""wasm3 0.5.0 (the ``pywasm3`` sdist's ``wasm3/``) with capsule's front end, built from the same sources
natively and for capsule: a WebAssembly interpreter, compiled from wasm, interpreting a wasm module.

The module (``wasm3/fib.c``, built with clang-19 for plain wasm32) has a recursive ``fib``, a 64-bit hash
loop, a sieve over its own memory, a floating-point series, and a division that traps. Each call's output and
exit status (a trap's message on stderr, status 1) must be what native wasm3 gives.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from capsule.sources import fetch, wasm3
from capsule.toolchain.clang import tool
from tests.thirdparty.conftest import kernel_param
from tests.thirdparty.runs import guest, native, same

HERE = Path(__file__).resolve().parent / "wasm3"
ENV = {"LANG": "C"}
CALLS = {
    "fib": ["fib", "24"],
    "mix": ["mix", "200000"],
    "primes": ["primes", "100000"],
    "leibniz": ["leibniz", "100000"],
    "trap": ["divide", "7", "0"],
    "missing": ["nope"],
}
EXPECTED = {"fib": b"46368\n", "primes": b"9592\n", "leibniz": b"3.1415826535897198\n"}
ENGINES = ["wasmtime", kernel_param()]


@pytest.fixture(scope="module")
def interp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    """(native wasm3, guest module, the module it interprets)."""
    try:
        tree = wasm3.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"wasm3 is not cached and PyPI cannot be reached: {e}")
    module = tmp_path_factory.mktemp("wasm3") / "fib.wasm"
    subprocess.run([tool("clang-19"), "--target=wasm32", "-nostdlib", "-O2", "-Wl,--no-entry", str(HERE / "fib.c"),
                    "-o", str(module)], check=True, capture_output=True)
    return wasm3.build_native(tree), wasm3.build_wasm(tree), module.read_bytes()


def test_fetched_tree_is_wasm3_0_5_0() -> None:
    tree = wasm3.fetch()
    assert '#define M3_VERSION       "0.5.0"' in (tree / "wasm3.h").read_text()
    assert (tree / fetch.STAMP).read_text().strip() == wasm3.SDIST_SHA256
    assert not (tree / "m3module.c").exists()  # the engine, not the Python bindings
    t0 = time.perf_counter()
    assert wasm3.fetch() == tree
    assert time.perf_counter() - t0 < 0.5


@pytest.mark.parametrize("call", CALLS)
def test_native_reference(call: str, interp: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    run = native(interp[0], ["wasm3", "fib.wasm", *CALLS[call]], cwd=tmp_path, env=ENV, files={"fib.wasm": interp[2]})
    if call in EXPECTED:
        assert run.stdout == EXPECTED[call] and run.code == 0
    elif call == "trap":
        assert (run.code, run.stderr) == (1, b"wasm3: divide: [trap] integer divide by zero\n")
    elif call == "missing":
        assert (run.code, run.stderr) == (1, b"wasm3: nope: function lookup failed\n")


@pytest.mark.parametrize("engine", ENGINES)
def test_calls_match_native(engine: str, interp: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    exe, wasm, module = interp
    for name, args in CALLS.items():
        ref = native(exe, ["wasm3", "fib.wasm", *args], cwd=tmp_path / f"native-{name}", env=ENV,
                     files={"fib.wasm": module})
        got = guest(wasm, ["wasm3", "fib.wasm", *args], engine=engine, tmp=tmp_path / name, env=ENV,
                    files={"fib.wasm": module})
        print(f"\nwasm3 {' '.join(args)}: native {ref.seconds * 1e3:.1f} ms, {engine} {got.seconds * 1e3:.1f} ms "
              f"(+{got.load_seconds:.1f} s to load)")
        same(ref, got)


@pytest.mark.requires_bpf
def test_fib_in_kernel_sample(interp: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    """The regular suite's sample of the large programs in the kernel: wasm3 is the one that compiles and loads
    in seconds (the whole kernel matrix, every program, is ``CAPSULE_SLOW=1``)."""
    exe, wasm, module = interp
    argv, files = ["wasm3", "fib.wasm", *CALLS["fib"]], {"fib.wasm": module}
    ref = native(exe, argv, cwd=tmp_path / "native", env=ENV, files=files)
    got = guest(wasm, argv, engine="kernel", tmp=tmp_path / "kernel", env=ENV, files=files)
    assert got.stdout == EXPECTED["fib"]
    same(ref, got)
