"""Lowering in a pool and from the function cache gives the object a serial build gives, byte for byte; the
cache lowers again exactly the functions whose input changed, and a failing function raises the serial error."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from capsule.bpf.elf_write import object_bytes
from capsule.bpf.insn import Insn
from capsule.compiler import Options, compile_module, function_cache, lower_all
from capsule.compiler.state import CompileError
from capsule.wasm import load
from tests.wasm.wasm_build import compile_c


def _source(n: int, tweak: int = 0) -> str:
    """n functions mixing integer switches, float arithmetic (soft-float library calls) and calls."""
    out = [f"double g{i}(double x, int k);" for i in range(n + 1)]
    out.append(f"double g{n}(double x, int k) {{ return x * 0.5 + k; }}")
    for i in range(n):
        c = i + (tweak if i == 3 else 0)
        cases = " ".join(f"case {k}: y = y * {k + 2} + {c}; break;" for k in range(6))
        out.append(
            f"__attribute__((noinline)) double g{i}(double x, int k) {{ int y = k; switch (k & 7) {{ {cases} }} "
            f"return g{i + 1}(x / 3.0 + y, (y ^ {i * 7919}) & 0xffff) + (double)y; }}"
        )
    out.append('__attribute__((export_name("run"))) int run(int x) { return (int)g0((double)x, x); }')
    return "\n".join(out)


@pytest.fixture(scope="module")
def wasm() -> bytes:
    return compile_c(_source(24), ["-fno-inline"])


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every module counts as large (the pool and the cache apply); the cache lives in ``tmp_path``."""
    monkeypatch.setattr(lower_all, "POOL_MIN_INSTRUCTIONS", 0)
    monkeypatch.setenv("CAPSULE_CACHE", str(tmp_path))
    monkeypatch.delenv("CAPSULE_JOBS", raising=False)
    monkeypatch.delenv("CAPSULE_LOWERED_CACHE", raising=False)
    return tmp_path / "lowered"


def _build(wasm: bytes, monkeypatch: pytest.MonkeyPatch, jobs: str, cache: str) -> bytes:
    monkeypatch.setenv("CAPSULE_JOBS", jobs)
    monkeypatch.setenv("CAPSULE_LOWERED_CACHE", cache)
    return object_bytes(compile_module(load(wasm), Options()))


def _count_lowerings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = lower_all.compile_function

    def counting(info, index, *, leaf=False):  # type: ignore[no-untyped-def]
        seen.append(index)
        return real(info, index, leaf=leaf)

    monkeypatch.setattr(lower_all, "compile_function", counting)
    return seen


def test_pool_and_cache_give_the_serial_object(wasm: bytes, pooled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = _build(wasm, monkeypatch, "1", "0")
    assert not pooled.exists()
    assert _build(wasm, monkeypatch, "2", "0") == serial  # the pool, no cache
    assert _build(wasm, monkeypatch, "2", "1") == serial  # the pool filling the cache
    entries = len(list(pooled.rglob("*.pickle")))
    assert entries == len(load(wasm).funcs)
    seen = _count_lowerings(monkeypatch)
    assert _build(wasm, monkeypatch, "1", "1") == serial  # every function from the cache
    assert seen == []
    assert b"capsule_f64_div" in serial  # the soft-float functions the entries asked for are in the object


def test_a_changed_function_is_the_only_one_lowered_again(pooled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = compile_c(_source(24), ["-fno-inline"]), compile_c(_source(24, tweak=1), ["-fno-inline"])
    _build(before, monkeypatch, "1", "1")
    seen = _count_lowerings(monkeypatch)
    changed = _build(after, monkeypatch, "1", "1")
    assert 1 <= len(seen) <= 2, seen  # g3 (and nothing whose input did not change)
    monkeypatch.undo()
    monkeypatch.setattr(lower_all, "POOL_MIN_INSTRUCTIONS", 0)
    assert changed == _build(after, monkeypatch, "1", "0")


def test_a_compiler_change_misses_every_entry(wasm: bytes, pooled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _build(wasm, monkeypatch, "1", "1")
    monkeypatch.setattr(function_cache, "compiler_digest", lambda: "another compiler")
    seen = _count_lowerings(monkeypatch)
    _build(wasm, monkeypatch, "1", "1")
    assert len(seen) == len(load(wasm).funcs)


def test_an_unreadable_entry_is_a_miss(wasm: bytes, pooled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = _build(wasm, monkeypatch, "1", "1")
    for path in pooled.rglob("*.pickle"):
        path.write_bytes(b"not a pickle")
    assert _build(wasm, monkeypatch, "1", "1") == serial


def test_a_failing_function_raises_the_serial_error(wasm: bytes, pooled: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = lower_all.compile_function
    module = load(wasm)
    bad = {module.num_imported_funcs + 5, module.num_imported_funcs + 9}

    def failing(info, index, *, leaf=False):  # type: ignore[no-untyped-def]
        if index in bad:
            raise CompileError(f"cannot lower function {index}")
        return real(info, index, leaf=leaf)

    monkeypatch.setattr(lower_all, "compile_function", failing)  # the forked workers inherit it
    for jobs in ("1", "2"):
        monkeypatch.setenv("CAPSULE_JOBS", jobs)
        with pytest.raises(CompileError, match=f"function {min(bad)}$"):
            compile_module(load(wasm), Options())


def test_insn_pickles_whole() -> None:
    ins = [Insn(0x18, 1, 1, 0, 1 << 40, ref="f", sym="l"), Insn(0x85, src=1, imm=-1, ref="g"), Insn(0x95)]
    assert pickle.loads(pickle.dumps(ins)) == ins
