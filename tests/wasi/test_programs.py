"""C and C++ programs built with capsule's guest runtime give the native gcc build's output, exit status and
files, on every engine in harness.ENGINES."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from tests.wasi.harness import compare, engine_params, guest, native, program

ENGINES = engine_params()
FLOAT_ENGINES = engine_params(floats=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_printf_integers(engine, tmp_path):
    out = compare("printf_int.c", engine=engine, tmp=tmp_path)
    assert b"%#010x" in out.stdout and out.stdout.count(b"\n") > 40


@pytest.mark.parametrize("engine", FLOAT_ENGINES)
def test_printf_doubles(engine, tmp_path):
    out = compare("printf_float.c", engine=engine, tmp=tmp_path)
    assert b"0x1.921fb54442d18p+1" in out.stdout  # %a of pi


@pytest.mark.parametrize("engine", ENGINES)
def test_malloc_stress(engine, tmp_path):
    out = compare("malloc_stress.c", engine=engine, tmp=tmp_path)
    assert b"big ok" in out.stdout and b"checksum" in out.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_qsort_bsearch(engine, tmp_path):
    out = compare("sort_search.c", engine=engine, tmp=tmp_path)
    assert b"kiwi at" in out.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_string_and_ctype(engine, tmp_path):
    out = compare("strings.c", engine=engine, tmp=tmp_path)
    assert b"memmove 0123012345678" in out.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_argv_and_environment(engine, tmp_path):
    env = {"HOME": "/home/guest", "GREETING": "hello world", "EMPTY": "", "WITH_EQUALS": "a=b=c"}
    out = compare("args_env.c", ["one", "two words", "", "ünïcode", "--flag=x"], engine=engine, tmp=tmp_path, env=env)
    assert out.code == 6 and b"WITH_EQUALS=a=b=c" in out.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_file_io_through_memory_fs(engine, tmp_path):
    inp = "".join(f"input line {i}\n" for i in range(37)).encode()
    out = compare("files.c", engine=engine, tmp=tmp_path, files={"input.txt": inp})
    assert b"input lines 37" in out.stdout
    assert set(out.files) == {"out/a.txt", "out/b.bin", "out/sub/moved.txt"}
    assert out.files["out/b.bin"][1000:1002] == b"" and len(out.files["out/b.bin"]) == 600
    assert b"close(fd)                                        -> -1 EBADF" in out.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_time_and_sleep(engine, tmp_path):
    out = compare("time_clock.c", engine=engine, tmp=tmp_path)
    assert b": 0" not in out.stdout, out.stdout


@pytest.mark.parametrize("mode", ["return", "return7", "exit3", "exit255", "midoutput", "_exit"])
@pytest.mark.parametrize("engine", ENGINES)
def test_exit_codes(engine, mode, tmp_path):
    out = compare("exit_codes.c", [mode], engine=engine, tmp=tmp_path)
    expected = {"return": 0, "return7": 7, "exit3": 3, "exit255": 255, "midoutput": 42, "_exit": 9}[mode]
    assert out.code == expected
    if mode == "midoutput":  # ~1 MB, far more than the guest's output buffer, and nothing lost
        assert out.stdout.count(b"\n") == 20000 + 1 and out.stdout.endswith(b"partial line without newline"
                                                                            b"atexit handler ran\n")


@pytest.mark.parametrize("engine", ENGINES)
def test_stdin(engine, tmp_path):
    data = b"".join(b"word%d another  word\tthird\n" % i for i in range(20000))  # 600 KB: several refills
    out = compare("stdin_filter.c", engine=engine, tmp=tmp_path, stdin=data)
    assert out.stdout.endswith(b"\n20000 80000 %d " % len(data) + out.stdout.split()[-1] + b"\n")


@pytest.mark.parametrize("engine", ENGINES)
def test_cpp_classes_and_containers(engine, tmp_path):
    out = compare("cpp_classes.cc", engine=engine, tmp=tmp_path)
    assert out.code == 4 and b"constructed before main" in out.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_100_megabytes_of_output_complete_and_in_order(engine, tmp_path):
    out = guest(program("big_output.c"), ["100"], engine=engine, env={}, tmp=tmp_path)
    assert out.code == 0 and out.stderr == b"wrote 100000000\n"
    assert len(out.stdout) == 100_000_000
    expected = hashlib.sha256()
    line, n, total = b"", 0, 0
    while total < 100_000_000:
        line = b"%010d abcdefghijklmnopqrstuvwxyz0123456789\n" % n
        n += 1
        take = min(len(line), 100_000_000 - total)
        expected.update(line[:take])
        total += take
    assert hashlib.sha256(out.stdout).hexdigest() == expected.hexdigest()


@pytest.mark.parametrize("engine", ENGINES)
def test_malloc_returns_null_when_memory_is_exhausted(engine, tmp_path):
    out = guest(program("oom.c"), [], engine=engine, env={}, flags=["-Wl,--max-memory=67108864"], tmp=tmp_path)
    assert out.stdout == b"allocated some MiB before NULL\nhuge malloc NULL\nafter free ok\n"
    assert out.code == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_unsupported_calls_closed_fds_random_and_yield(engine, tmp_path):
    out = guest(program("wasi_edge.c"), [], engine=engine, env={}, tmp=tmp_path)
    assert out.stdout == (b"link -1 ENOSYS\nsymlink -1 ENOSYS\ngetentropy 0 nonzero most\nsched_yield 0\n"
                          b"capsule_yield returns, clock forward 1\n")
    assert out.stderr == b"closing stdout\nwrite to closed stdout -1 EBADF\n"


def test_native_reference_really_runs(tmp_path):
    """The comparison is only worth something if the native side is a real run with the same inputs."""
    out = native(program("args_env.c"), ["x"], env={"GREETING": "g"}, tmp=tmp_path)
    assert out.code == 2 and b"argv0 prog" in out.stdout and b"GREETING=g" in out.stdout
    assert subprocess.run(["true"]).returncode == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_setjmp_longjmp(engine, tmp_path):
    """longjmp across 1000 frames, a nested setjmp per call, and repeated longjmp to one setjmp in a loop."""
    out = compare("setjmp_longjmp.c", engine=engine, tmp=tmp_path)
    assert b"back with 42" in out.stdout and b"div 5 -7" in out.stdout and out.stdout.count(b"loop ") == 9
