"""`capsule build` and `capsule call`: a wasm module built to a BPF object and called in the kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.wasm.wasm_build import compile_c

SRC = r"""
__attribute__((export_name("add"))) int add(int a, int b) { return a + b; }
__attribute__((export_name("mul64"))) long long mul64(long long a, long long b) { return a * b; }
static int inner(int x) { if (x == 3) __builtin_trap(); return x; }
__attribute__((noinline)) static int middle(int x) { return inner(x) + 1; }
__attribute__((export_name("outer"))) int outer(int x) { return middle(x) * 2; }
"""


def capsule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def wasm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("w") / "m.wasm"
    path.write_bytes(compile_c(SRC))
    return path


@pytest.mark.requires_bpf
def test_build_then_call_object(wasm: Path, tmp_path: Path) -> None:
    obj = tmp_path / "m.bpf.o"
    res = capsule("build", str(wasm), "-o", str(obj))
    assert res.returncode == 0, res.stderr
    assert obj.exists() and "BPF instructions" in res.stdout
    res = capsule("call", str(obj), "add", "40", "2")
    assert (res.returncode, res.stdout) == (0, "42\n")


@pytest.mark.requires_bpf
@pytest.mark.parametrize("args,out", [(["0x10", "-3"], "13\n"), (["2147483647", "1"], "-2147483648\n")])
def test_call_wasm_directly_with_hex_and_negative(wasm: Path, args: list[str], out: str) -> None:
    res = capsule("call", str(wasm), "add", *args)
    assert (res.returncode, res.stdout) == (0, out), res.stderr


@pytest.mark.requires_bpf
def test_i64_results_are_signed(wasm: Path) -> None:
    res = capsule("call", str(wasm), "mul64", "-3000000000", "3")
    assert res.stdout == "-9000000000\n"


@pytest.mark.requires_bpf
def test_trap_exits_nonzero_with_backtrace(wasm: Path) -> None:
    res = capsule("call", str(wasm), "outer", "3")
    assert res.returncode == 2
    lines = res.stderr.splitlines()
    assert lines[0] == "capsule: trap in outer: unreachable"
    assert [ln.strip() for ln in lines[1:]][-1] == "in outer"
    assert "in middle" in res.stderr


@pytest.mark.requires_bpf
def test_stats(wasm: Path) -> None:
    res = capsule("call", str(wasm), "outer", "5", "--stats")
    assert res.returncode == 0 and res.stdout == "12\n"
    for key in ("processed insns:", "load time:", "regions executed:", "invocations: 1", "run_time_ns:"):
        assert key in res.stderr


@pytest.mark.requires_bpf
def test_profiles_give_the_same_answer(wasm: Path) -> None:
    for flags in ([], ["--fast"], ["--no-may-goto"], ["--fibers", "2", "--stack-size", "0x100000"]):
        res = capsule("call", str(wasm), "outer", "20", *flags)
        assert (res.returncode, res.stdout) == (0, "42\n"), (flags, res.stderr)


@pytest.mark.requires_bpf
@pytest.mark.parametrize("argv,message", [
    (["call", "{wasm}", "nope"], "no exported function 'nope'"),
    (["call", "{wasm}", "add", "1"], "add takes 2 argument(s), got 1"),
    (["call", "{wasm}", "add", "1", "x"], "not an integer"),
    (["call", "{bad}", "f"], "malformed"),
    (["call", "{plain}", "f"], "not a capsule-compiled object"),
    (["build", "{wasm}", "--stack-size", "1000"], "power of two"),
])
def test_bad_input_is_a_clear_error(argv: list[str], message: str, wasm: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.wasm"
    bad.write_bytes(b"\0asm\x01\0\0\0\x01\xff")
    from tests.clang import compile_bpf

    plain = compile_bpf(Path(__file__).parent.parent / "capsule" / "examples" / "packet_stats.bpf.c")
    res = capsule(*(a.format(wasm=wasm, bad=bad, plain=plain) for a in argv))
    assert res.returncode != 0
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_unsupported_feature_names_function_and_offset(tmp_path: Path) -> None:
    """An instruction the compiler has no lowering for: the build says which, where, and in which function."""
    from tests.wasm.wasm_build import wat

    src = tmp_path / "u.wasm"
    src.write_bytes(wat('(module (memory 1) (data "ab") (func $init_it (memory.init 0 (i32.const 0) '
                        '(i32.const 0) (i32.const 1))) (export "f" (func $init_it)))'))
    res = capsule("build", str(src), "-o", str(tmp_path / "x.o"))
    assert res.returncode == 1
    assert '"init_it"' in res.stderr and "offset 0x" in res.stderr and "memory.init" in res.stderr, res.stderr


@pytest.mark.parametrize("budget", ["0", "-5"])
def test_budget_must_be_positive(wasm: Path, budget: str) -> None:
    """Issue 16.8: a budget of 0 spun for ever and a negative one crashed with struct.error."""
    res = capsule("call", str(wasm), "add", "1", "2", "--budget", budget)
    assert res.returncode == 2 and "--budget: must be at least 1" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.requires_bpf
def test_budget_of_one_makes_progress(wasm: Path) -> None:
    res = capsule("call", str(wasm), "outer", "5", "--budget", "1")
    assert (res.returncode, res.stdout) == (0, "12\n")


@pytest.mark.requires_bpf
@pytest.mark.parametrize("args,message", [
    (["add", "99999999999999999999", "1"], "argument 1 (i32) is 99999999999999999999, outside [-2147483648, "
                                            "4294967295]"),
    (["add", "1", "-2147483649"], "argument 2 (i32) is -2147483649"),
    (["mul64", "1", str(1 << 64)], f"argument 2 (i64) is {1 << 64}, outside"),
])
def test_arguments_outside_their_type_are_refused(wasm: Path, args: list[str], message: str) -> None:
    """Issue 16.9: such values were wrapped silently (add 99999999999999999999 1 printed 1661992960)."""
    res = capsule("call", str(wasm), *args)
    assert res.returncode == 1 and message in res.stderr and res.stdout == ""


@pytest.mark.requires_bpf
def test_arguments_at_the_edges_of_their_type_are_taken(wasm: Path) -> None:
    res = capsule("call", str(wasm), "add", "4294967295", "1")  # the raw bits of -1, plus one
    assert (res.returncode, res.stdout) == (0, "0\n")
    res = capsule("call", str(wasm), "add", "-2147483648", "0")
    assert (res.returncode, res.stdout) == (0, "-2147483648\n")
