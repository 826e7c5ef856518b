"""The C toolchain (build, cache, diagnostics), the host protocol (control block layout), and ``capsule run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from capsule.runtime import wasi_host
from capsule.toolchain.clang import ToolchainError
from capsule.toolchain.guest import GUEST_DIR, build_wasm
from capsule.toolchain.native import build_native
from capsule.wasm import ExternKind, load
from tests.wasi.harness import program

ROOT = Path(__file__).resolve().parent.parent.parent

FIELDS = ["magic", "version", "out_buf", "out_cap", "out_len", "in_buf", "in_cap", "in_len", "in_pos", "in_eof",
          "argc", "argv_buf", "argv_size", "envc", "env_buf", "env_size", "flags", "tty", "exit_code", "exited",
          "reason", "yields", "sleep_until"]


def test_control_block_layout_matches_the_host(tmp_path):
    """capsule_io.h and wasi_host.py describe the same bytes (compiled for wasm32 offsets equal native ones:
    every field is a fixed-width integer)."""
    src = tmp_path / "layout.c"
    body = "".join(f'    printf("{f} %zu\\n", offsetof(struct capsule_io, {f}));\n' for f in FIELDS)
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "capsule_io.h"\nint main(void) {\n' + body +
                   '    printf("size %zu magic %u version %u\\n", sizeof(struct capsule_io), CAPSULE_IO_MAGIC, '
                   "CAPSULE_IO_VERSION);\n}\n")
    exe = build_native([src], tmp_path / "layout", [f"-I{GUEST_DIR / 'wasi'}"])
    lines = dict(line.split(" ", 1) for line in subprocess.run([exe], capture_output=True, text=True).stdout.split("\n")
                 if line)
    assert (lines["magic"], lines["version"]) == ("0", "4")
    for f in FIELDS[2:]:
        const = "IO_" + f.upper()
        assert int(lines[f]) == getattr(wasi_host, const), f
    assert lines["size"] == f"{wasi_host.IO_SIZE} magic {wasi_host.IO_MAGIC} version {wasi_host.IO_VERSION}"


def test_built_module_imports_only_the_capsule_intrinsics():
    wasm = build_wasm([program("files.c")], ["-O2"]).wasm
    m = load(wasm.read_bytes())
    modules = {imp.module for imp in m.imports}
    assert modules == {"capsule"}, [f"{i.module}.{i.name}" for i in m.imports]
    assert {imp.name for imp in m.imports} <= {"yield", "exit", "clock_ns", "random"}
    exports = {e.name for e in m.exports if e.kind == ExternKind.FUNC}
    assert {"_start", "capsule_io", "capsule_alloc", "capsule_free", "capsule_fs_add", "capsule_fs_mkdir",
            "capsule_fs_list", "capsule_fs_list_free"} <= exports


def test_non_compiling_c_shows_clang_diagnostics(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) {\n    return undefined_name + 1;\n}\n")
    with pytest.raises(ToolchainError) as e:
        build_wasm([bad], cache=tmp_path / "cache")
    assert "bad.c:2:12: error: use of undeclared identifier 'undefined_name'" in str(e.value)
    res = _cli(["run", "--engine", "wasmtime", str(bad)])
    assert res.returncode == 1
    assert "undeclared identifier 'undefined_name'" in res.stderr


def test_build_cache_hits_and_follows_headers(tmp_path):
    (tmp_path / "val.h").write_text("#define VALUE 1\n")
    src = tmp_path / "main.c"
    src.write_text('#include <stdio.h>\n#include "val.h"\nint main(void) { printf("%d\\n", VALUE); return 0; }\n')
    cache = tmp_path / "cache"
    flags = [f"-I{tmp_path}"]
    first = build_wasm([src], flags, cache=cache)
    again = build_wasm([src], flags, cache=cache)
    assert not first.cached and again.cached and again.wasm == first.wasm
    assert not build_wasm([src], [*flags, "-DOTHER"], cache=cache).cached  # flags are part of the key
    (tmp_path / "val.h").write_text("#define VALUE 2\n")
    changed = build_wasm([src], flags, cache=cache)
    assert not changed.cached
    res = _cli(["run", "--engine", "wasmtime", f"-I{tmp_path}", str(src)])
    assert res.stdout == "2\n"


def _cli(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False, **kw)


def test_capsule_run_files_dirs_out_stdin_env_and_status(tmp_path):
    src = tmp_path / "prog.c"
    src.write_text(r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
    char line[100];
    FILE *f = fopen("data/in.txt", "r");
    fgets(line, sizeof line, f); fclose(f);
    printf("args %d %s %s env %s file %s", argc, argv[1], argv[2], getenv("MODE"), line);
    f = fopen("/cfg/settings.ini", "r");
    fgets(line, sizeof line, f); fclose(f);
    printf("mapped %s", line);
    fgets(line, sizeof line, stdin);
    printf("stdin %s", line);
    mkdir("results", 0755);
    f = fopen("results/out.txt", "w"); fprintf(f, "made by %s\n", argv[1]); fclose(f);
    f = fopen("data/in.txt", "a"); fputs("appended\n", f); fclose(f);
    fprintf(stderr, "done\n");
    return 5;
}
""")
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("hello from the host\n")
    (data / "untouched.txt").write_text("same\n")
    (tmp_path / "settings.ini").write_text("level=9\n")
    (tmp_path / "stdin.txt").write_text("typed line\n")
    out = tmp_path / "out"
    res = _cli(["run", "--engine", "wasmtime", "--dir", f"{data}:/data", "--file", f"{tmp_path / 'settings.ini'}:/cfg/"
                "settings.ini", "--out", str(out), "--stdin", str(tmp_path / "stdin.txt"), "--env", "MODE=fast",
                str(src), "first", "-x"])
    assert res.returncode == 5, res.stderr
    assert res.stdout == ("args 3 first -x env fast file hello from the host\nmapped level=9\nstdin typed line\n")
    assert res.stderr == "done\n"
    assert (out / "results" / "out.txt").read_text() == "made by first\n"
    assert (out / "data" / "in.txt").read_text() == "hello from the host\nappended\n"
    assert not (out / "data" / "untouched.txt").exists()  # only what the guest created or changed comes back
    assert not (out / "cfg").exists()


@pytest.mark.requires_bpf
def test_capsule_run_foreign_wasi_module(tmp_path):
    """A wasm32-wasi module built without capsule's runtime imports WASI itself: it is linked with capsule's
    standalone runtime and runs on both engines."""
    src = tmp_path / "plain.c"
    src.write_text('#include <stdio.h>\nint main(int c, char **v) { printf("plain %s\\n", v[1]); return 4; }\n')
    wasm = tmp_path / "plain.wasm"
    subprocess.run(["clang-19", "--target=wasm32-wasi", "-O2", str(src), "-o", str(wasm)], check=True)
    res = _cli(["run", "--engine", "wasmtime", str(wasm), "arg"])
    assert (res.returncode, res.stdout) == (4, "plain arg\n")
    res = _cli(["run", "--engine", "kernel", str(wasm), "arg"])
    assert (res.returncode, res.stdout) == (4, "plain arg\n"), res.stderr


def test_guest_trap_is_reported(tmp_path):
    src = tmp_path / "trap.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\nint main(void) { printf("before\\n"); abort(); }\n')
    res = _cli(["run", "--engine", "wasmtime", str(src)])
    assert res.returncode == 134 and res.stdout == "before\n" and "guest trap" in res.stderr


def test_not_a_capsule_module_is_refused():
    with pytest.raises(wasi_host.WasiError, match="capsule_io"):
        wasi_host.WasiHost(_NoRuntime(), wasi_host.WasiConfig())


class _NoRuntime:
    def has_export(self, name: str) -> bool:
        return False


def test_c_demo_under_wasmtime():
    from rich.console import Console

    from capsule.demo.c_program import run_c_demo

    console = Console(record=True, width=160)
    assert run_c_demo(console, engine="wasmtime") == 0
    text = console.export_text()
    assert "n-queens solutions: 1 0 0 2 10 4 40 92 352 724" in text and "identical output" in text
