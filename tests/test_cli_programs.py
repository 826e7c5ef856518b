"""The command line as users meet it with programs of several files: ``capsule run a.c b.c -- ARGS`` (and the old
single-file usage, unchanged), the build's progress line, and ``capsule demo doom``."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from capsule.cli.common import progress_printer
from capsule.cli.run import split_operands
from capsule.toolchain.progress import BuildEvent

ROOT = Path(__file__).resolve().parents[1]


def capsule(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, check=False)


@pytest.mark.parametrize("operands,inputs,args", [
    (["p.c"], ["p.c"], []),
    (["p.c", "x", "-y"], ["p.c"], ["x", "-y"]),  # the old usage: the first operand is the program
    (["a.c", "b.c", "--", "x"], ["a.c", "b.c"], ["x"]),
    (["a.c", "b.c", "--"], ["a.c", "b.c"], []),
    (["p.c", "--", "x", "--", "y"], ["p.c"], ["x", "--", "y"]),  # only the first -- separates
    (["--", "p.c", "x"], ["p.c"], ["x"]),  # a leading -- ends capsule's options only
    (["prog.wasm", "--", "a"], ["prog.wasm"], ["a"]),
])
def test_operands_split_at_the_first_separator(operands: list[str], inputs: list[str], args: list[str]) -> None:
    assert split_operands(operands) == (inputs, args)


def test_no_program_is_a_clear_error() -> None:
    with pytest.raises(SystemExit, match="no program before `--`"):
        split_operands(["--", "--", "x"])
    with pytest.raises(SystemExit, match="no program given"):
        split_operands([])


def _sources(tmp_path: Path) -> None:
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint add(int, int);\n'
                                     'int main(int argc, char **argv) {\n'
                                     '    printf("add %d argc %d", add(2, 3), argc);\n'
                                     '    for (int i = 1; i < argc; i++) printf(" [%s]", argv[i]);\n'
                                     '    printf("\\n");\n    return 7;\n}\n')
    (tmp_path / "add.c").write_text("int add(int a, int b) { return a + b; }\n")
    (tmp_path / "solo.c").write_text('#include <stdio.h>\nint main(int argc, char **argv) {\n'
                                     '    for (int i = 1; i < argc; i++) printf("[%s]", argv[i]);\n'
                                     '    printf("\\n");\n    return 0;\n}\n')


def test_run_several_sources(tmp_path: Path) -> None:
    _sources(tmp_path)
    res = capsule("run", "--engine", "wasmtime", "main.c", "add.c", "--", "x", "--", "-v", cwd=tmp_path)
    assert (res.returncode, res.stdout) == (7, "add 5 argc 4 [x] [--] [-v]\n"), res.stderr
    res = capsule("run", "--engine", "wasmtime", "solo.c", "add.c", "-q", cwd=tmp_path)  # old usage: arguments
    assert (res.returncode, res.stdout) == (0, "[add.c][-q]\n"), res.stderr


def test_forgotten_separator_is_explained(tmp_path: Path) -> None:
    _sources(tmp_path)
    res = capsule("run", "--engine", "wasmtime", "main.c", "add.c", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "main.c (object): undefined symbol: add" in res.stderr
    assert "note: add.c became the program's arguments" in res.stderr and "capsule run main.c add.c -- " in res.stderr


@pytest.mark.parametrize("operands,message", [
    (["main.c", "missing.c", "--"], "missing.c: no such file"),
    (["main.c", "notes.txt", "--"], "notes.txt: only C/C++ sources can be combined"),
    (["notes.txt"], "notes.txt: not a .c/.cc/.cpp source, .wasm module or .bpf.o object"),
])
def test_bad_operands_are_one_line(operands: list[str], message: str, tmp_path: Path) -> None:
    _sources(tmp_path)
    (tmp_path / "notes.txt").write_text("not a program\n")
    res = capsule("run", "--engine", "wasmtime", *operands, cwd=tmp_path)
    assert res.returncode == 1 and message in res.stderr and res.stderr.count("\n") == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_on_a_terminal_and_nothing_in_a_pipe() -> None:
    term = _Terminal()
    show = progress_printer(term)
    for i in (1, 2, 3):
        show(BuildEvent("compile", i, 3, f"f{i}.c", cached=i == 2))
    show(BuildEvent("link", 1, 1, "x.wasm"))
    text = term.getvalue()
    assert "capsule: compiling 1/3 f1.c" in text and "capsule: compiling 3/3 f3.c\r\x1b[K" in text
    assert text.endswith("capsule: linking 1/1 x.wasm\r\x1b[K")  # erased when done: the terminal is left clean
    pipe = io.StringIO()
    progress_printer(pipe)(BuildEvent("compile", 1, 1, "f.c"))
    assert pipe.getvalue() == ""


def test_demo_doom_writes_pngs(tmp_path: Path) -> None:
    res = capsule("demo", "doom", "--engine", "wasmtime", "--frames", "20", "--png", str(tmp_path / "frames"))
    if "cannot reach" in res.stderr or "cannot download" in res.stderr:
        pytest.skip(f"DOOM is not cached and its registries cannot be reached: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    assert "DOOM on wasmtime: 20 frames" in res.stdout and "exit status 0" in res.stdout
    pngs = sorted((tmp_path / "frames").iterdir())
    assert [p.name for p in pngs] == [f"frame-{i:04d}.png" for i in range(1, 21)]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert len({p.read_bytes() for p in pngs}) > 3  # the title screen, then the menu opening


def test_demo_doom_bad_frames() -> None:
    res = capsule("demo", "doom", "--frames", "0")
    assert res.returncode == 1 and "--frames must be positive" in res.stderr


@pytest.mark.requires_bpf
def test_kernel_run_of_several_sources_reports_lowering_and_verifying(tmp_path: Path) -> None:
    """The two long steps after the build, as progress events; then the run of the two sources in the kernel."""
    from capsule.testing.engines import open_guest
    from capsule.toolchain.guest import build_wasm

    _sources(tmp_path)
    wasm = build_wasm([tmp_path / "main.c", tmp_path / "add.c"], cache=tmp_path / "cache").wasm
    events: list[BuildEvent] = []
    open_guest(wasm, "kernel", progress=events.append).close()
    assert [(e.stage, e.done, e.total) for e in events] == [("lower", 0, 1), ("lower", 1, 1), ("verify", 0, 1),
                                                            ("verify", 1, 1)]
    assert events[-1].item == f"1 BPF program of {wasm.name}"
    res = capsule("run", "main.c", "add.c", "--", "x", cwd=tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (7, "add 5 argc 2 [x]\n", "")  # no status line in a pipe


def test_build_summary_counts_every_program_of_a_split_object() -> None:
    from capsule.cli.build import object_summary
    from capsule.compiler import Options, compile_module
    from capsule.wasm import load
    from tests.wasm.wasm_build import compile_c

    src = "__attribute__((noinline)) int f0(int x) { return x * 3; }\n"  # a chain of calls in loops
    src += "".join(f"__attribute__((noinline)) int f{i}(int x) {{ int s = 0; for (int j = 0; j < x; j++) "
                   f"s += f{i - 1}(j ^ s) * {i + 2}; return s; }}\n" for i in range(1, 6))
    src += '__attribute__((export_name("g"))) int g(int x) { return f5(x); }\n'
    module = load(compile_c(src))
    one = compile_module(module)
    assert len(one.programs) == 1 and " in " not in object_summary(one)
    split = compile_module(module, Options(program_budget=1, phys_target=200))  # a physical function per program
    n = len(split.programs)
    insns = sum(i.slots() for p in split.programs.values() for i in p.insns)
    assert n >= 3 and object_summary(split).startswith(f"{insns} BPF instructions, ")
    assert object_summary(split).endswith(f" physical functions in {n} BPF programs")
