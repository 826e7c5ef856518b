"""``capsule opt`` never loses code (issue 16.1).

An object's code that no program holds (``.text`` functions no program calls, e.g. ``int func(void *ctx)``
compiled without ``SEC()``, or code that no ``STT_FUNC`` symbol covers, as older clangs wrote) used to vanish
from the output with exit status 0. Now ``opt`` refuses such an object in one line and writes nothing; and over
every object of the corpus, no function disappears and none loses more instruction slots than the optimizer
reports removing from the programs that hold it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.elf import read_object
from capsule.cli import main
from tests.bpf.test_disasm import BUILDS, compiled
from tests.clang import compile_bpf

TEXT_ONLY = """
int func(void *ctx) { return ((int *)ctx)[0] + 1; }
static __attribute__((noinline)) int triple(int x) { return x * 3; }
int other(int y) { return triple(y) + 2; }
"""

UNCALLED = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
__attribute__((noinline)) int unused(int x) { return x * 7; }
SEC("xdp") int prog(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "GPL";
"""

NOTYPE_ASM = """
	.section	xdp,"ax",@progbits
	.globl	prog
prog:
	r0 = 2
	exit
"""


def capsule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True, timeout=120)


def notype_object(tmp_path: Path) -> Path:
    if shutil.which("llvm-mc-19") is None:
        pytest.skip("llvm-mc-19 comes from setup.sh")
    src, obj = tmp_path / "notype.s", tmp_path / "notype.o"
    src.write_text(NOTYPE_ASM)
    subprocess.run(["llvm-mc-19", "-triple", "bpfel", "-filetype=obj", str(src), "-o", str(obj)], check=True)
    return obj


@pytest.mark.parametrize(
    ("kind", "names"),
    [("text_only", ["'func'", "'other'"]), ("uncalled", ["'unused'"]), ("notype", ["'prog'"])],
)
def test_code_in_no_program_is_refused_not_dropped(kind: str, names: list[str], tmp_path: Path) -> None:
    obj = {"text_only": lambda: compile_bpf(TEXT_ONLY, "v3"), "uncalled": lambda: compile_bpf(UNCALLED, "v3"),
           "notype": lambda: notype_object(tmp_path)}[kind]()
    out = tmp_path / "out.o"
    res = capsule("opt", "--no-check", str(obj), "-o", str(out))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("capsule opt: ") and str(obj) in res.stderr
    assert all(n in res.stderr for n in names), res.stderr
    assert not out.exists()


def _functions(obj: Path) -> dict[str, int]:
    """Function name -> instruction slots, from the ELF symbol table (not capsule's reader)."""
    with obj.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_size"] // 8 for s in symtab.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"}


_LINE = re.compile(r"^(\S+): (\d+) -> (\d+) insns")


@pytest.mark.parametrize("stem,cpu", BUILDS, ids=[f"{s}-{c}" for s, c in BUILDS])
def test_no_function_disappears_or_loses_more_than_reported(stem: str, cpu: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    obj = compiled(stem, cpu)
    out = tmp_path / "out.o"
    assert main(["opt", "--no-check", str(obj), "-o", str(out)]) == 0
    removed = {m[1]: int(m[2]) - int(m[3]) for line in capsys.readouterr().out.splitlines() if (m := _LINE.match(line))}
    spec = read_object(obj)
    assert set(removed) == set(spec.programs)
    holders: dict[str, list[str]] = {}  # function -> the programs whose linked code holds it
    for name, ps in spec.programs.items():
        for ins in ps.insns:
            if ins.sym:
                holders.setdefault(ins.sym, []).append(name)
    before, after = _functions(obj), _functions(out)
    assert before, f"{obj.name} has no functions"
    for fn, slots in before.items():
        assert fn in after, f"{fn} disappeared"
        budget = sum(removed[p] for p in holders.get(fn, []))
        assert slots - after[fn] <= budget, f"{fn}: {slots} -> {after[fn]} slots, reported removed {budget}"
