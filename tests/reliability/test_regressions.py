"""Bugs the fuzzer and the hostile-object tests found outside the compiler, each kept from coming back: every one
was a Python traceback where a user should read one line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import write_object
from tests.clang import CORPUS, compile_bpf

EXTERNS = Path(__file__).parents[1] / "bpf" / "elf_inputs" / "externs.c"
KFUNCS = Path(__file__).parents[1] / "bpf" / "elf_inputs" / "kfunc_arena.c"


def _capsule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True, timeout=300)


def _one_line(res: subprocess.CompletedProcess[str], words: str) -> None:
    assert res.returncode == 1 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("capsule: ") and words in res.stderr, res.stderr


def test_opt_of_an_object_with_extern_variables(tmp_path: Path) -> None:
    """The ELF writer cannot write extern variables (``__ksym``, ``__kconfig``) back yet: it says so."""
    res = _capsule("opt", "--no-check", str(compile_bpf(EXTERNS)), "-o", str(tmp_path / "out.o"))
    _one_line(res, "cannot write a symbolic reference")
    assert not (tmp_path / "out.o").exists()


def test_opt_of_code_the_optimizer_cannot_take_apart(tmp_path: Path) -> None:
    """An instruction naming r11 (fuzzer, elf input 254 of seed 15) ended the optimizer with a RewriteError."""
    spec = read_object(compile_bpf(CORPUS / "xdp_parse.c"))
    ps = next(iter(spec.programs.values()))
    ps.insns[0] = dataclasses.replace(ps.insns[0], dst=11)
    write_object(spec, tmp_path / "bad.o")
    _one_line(_capsule("opt", "--no-check", str(tmp_path / "bad.o"), "-o", str(tmp_path / "out.o")),
              "names a register above r10")


def test_run_of_a_file_that_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "x.bpf.o").write_bytes(b"\x7fELF" + bytes(60))
    _one_line(_capsule("run", str(tmp_path / "x.bpf.o")), "x.bpf.o")


def test_opt_of_an_object_calling_a_kfunc_this_kernel_lacks(tmp_path: Path) -> None:
    """A kfunc's name changed in the symbol table (fuzzer, elf input 207 of seed 1): writing the optimised object
    needs the kfunc's prototype from the kernel's BTF, which has none: one line, not a ValueError."""
    data = compile_bpf(KFUNCS).read_bytes()
    name = b"bpf_arena_free_pages"
    last = data.rindex(name)  # the symbol table's copy (the BTF's come first)
    bad = tmp_path / "bad.o"
    bad.write_bytes(data[:last] + b"bpf_arena_\x01ree_pages" + data[last + len(name):])
    _one_line(_capsule("opt", "--no-check", str(bad), "-o", str(tmp_path / "out.o")), "not a function in the kernel")
