"""A C stack that overflows traps before it reaches the data below it (issue 16.2): the program printed and
flushed ``start`` and then recursed without end; in the kernel its output came out as ``starz6``, the
stack having grown into the buffer that waited to be drained."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .harness import engine_params, program


@pytest.mark.parametrize("engine", engine_params())
def test_flushed_output_survives_a_stack_overflow(engine: str) -> None:
    res = subprocess.run([sys.executable, "-m", "capsule.cli", "run", "--engine", engine,
                          str(program("stack_overflow.c"))], capture_output=True, timeout=600)
    assert res.stdout == b"start\n"
    assert res.returncode == 134 and b"Traceback" not in res.stderr
    if engine == "kernel":
        assert b"guest trap: call stack exhausted" in res.stderr
