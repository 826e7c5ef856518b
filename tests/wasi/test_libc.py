"""The guest's C library answers as glibc does where a program prints or compares the answer (issue 15.5):
errno values and strerror/perror texts, setlocale for locales a guest has and lacks, the empty path, overlong
names. One C program (``libc_linux.c``) runs natively (gcc) and in the guest; every line must be the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wasi.harness import _same, engine_params, guest, native

PROGRAM = Path(__file__).with_name("libc_linux.c")
PARTS = ["numbers", "files", "library", "locales"]


@pytest.mark.parametrize("engine", engine_params())
@pytest.mark.parametrize("part", PARTS)
def test_the_library_answers_as_glibc(part: str, engine: str, tmp_path: Path) -> None:
    env = {"LANG": "C"}
    a = native(PROGRAM, [part], env=env, tmp=tmp_path)
    b = guest(PROGRAM, [part], engine=engine, env=env, tmp=tmp_path)
    _same("stdout", a.stdout, b.stdout)
    _same("stderr", a.stderr, b.stderr)
    assert (b.code, a.code) == (0, 0)
    assert a.stdout.count(b"\n") >= 4


@pytest.mark.parametrize("engine", engine_params())
def test_the_environment_chooses_the_locale(engine: str, tmp_path: Path) -> None:
    for lang in ("C.UTF-8", "de_DE.UTF-8", "POSIX"):
        env = {"LANG": lang}
        (tmp_path / lang).mkdir()
        a = native(PROGRAM, ["locales"], env=env, tmp=tmp_path / lang)
        b = guest(PROGRAM, ["locales"], engine=engine, env=env, tmp=tmp_path / lang)
        _same(f"stdout with LANG={lang}", a.stdout, b.stdout)
