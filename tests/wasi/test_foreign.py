"""wasm32-wasi modules not built by capsule: merged with capsule's standalone WASI runtime
(``capsule.wasm.link``), then run in the kernel and under wasmtime like a program capsule built.

Three layers: the merge itself on small wat modules against a tiny hand-written "runtime" (every index space
renumbered, imports bound, memory instructions redirected, errors named); the real standalone runtime with a
wat program that calls fd_write/proc_exit itself; and a C program built by plain ``clang --target=wasm32-wasi``
with Debian's wasi-libc and its crt1 (the "another compiler" case), compared with the native gcc build, through
``capsule run`` too.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.testing.engines import open_guest
from capsule.toolchain.foreign import link_foreign
from capsule.toolchain.guest import build_standalone_runtime
from capsule.toolchain.native import build_native
from capsule.wasm import ExternKind, Op, load, read_module
from capsule.wasm.link import WASM_PAGE, LinkError, link, link_program, runtime_base
from capsule.wasm.link_encode import encode

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "tests" / "foreign"
ENGINES = ["wasmtime", pytest.param("kernel", marks=pytest.mark.requires_bpf)]

# -- the merge, on small modules ------------------------------------------------------------------------------
PROGRAM_WAT = r"""
(module
  (type $unused (func (param f64) (result f64)))
  (import "capsule" "yield" (func $yield))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory 1)
  (global $__stack_pointer (mut i32) (i32.const 4096))
  (global $counter (mut i32) (i32.const 40))
  (table 2 funcref)
  (elem (i32.const 1) $helper)
  (data (i32.const 16) "hi")
  (func $helper (result i32) global.get $counter)
  (func (export "write") (result i32)
    (call $fd_write (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 32)) drop
    (call $fd_write (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 32)) drop
    (i32.load (i32.const 32)))
  (func (export "indirect") (result i32) (call_indirect (result i32) (i32.const 1)))
  (func (export "size") (result i32) memory.size)
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  (func (export "_start") call $yield)
)
"""

RUNTIME_WAT = r"""
(module
  (import "capsule" "yield" (func $yield))
  (import "env" "memory" (memory 2))
  (global $__stack_pointer (mut i32) (i32.const 0x11000))
  (global $calls (mut i32) (i32.const 0))
  (table 3 funcref)
  (elem (i32.const 2) $rt_const)
  (data (i32.const 0x10000) "RT")
  (func $rt_const (result i32) i32.const 77)
  (func (export "__imported_wasi_snapshot_preview1_fd_write") (param i32 i32 i32 i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.store (local.get 3) (global.get $calls))
    i32.const 0)
  (func (export "__imported_wasi_snapshot_preview1_proc_exit") (param i32) unreachable)
  (func (export "capsule_program_memory_size") (result i32) i32.const 1)
  (func (export "capsule_program_memory_grow") (param i32) (result i32) (i32.add (local.get 0) (i32.const 1000)))
  (func (export "capsule_io") (result i32) (call_indirect (result i32) (i32.const 2)))
)
"""


def wat(text: str):  # type: ignore[no-untyped-def]
    return load(wasmtime.wat2wasm(text))


def instantiate(data: bytes) -> tuple[wasmtime.Store, dict]:
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    linker = wasmtime.Linker(engine)
    linker.define_func("capsule", "yield", wasmtime.FuncType([], []), lambda: None)
    inst = linker.instantiate(store, wasmtime.Module(engine, data))
    return store, {name: inst.exports(store)[name] for name in ("write", "indirect", "size", "grow", "capsule_io",
                                                                   "memory")}


def test_merge_renumbers_every_index_space():
    program, runtime = wat(PROGRAM_WAT), wat(RUNTIME_WAT)
    merged = link_program(program, runtime)
    # the shared intrinsic is imported once; fd_write is gone (bound to the runtime)
    assert [(i.module, i.name) for i in merged.imports] == [("capsule", "yield")]
    assert len(merged.funcs) == len(program.funcs) + len(runtime.funcs)
    assert len(merged.globals) == 4 and len(merged.tables) == 2 and len(merged.datas) == 2
    assert merged.memories[0].limits.min == 2  # the runtime's import asked for 2 pages
    # program memory instructions call the runtime's view of them
    size_fn = merged.funcs[len(program.funcs) - 3 + 0]  # "size" is the program's third-from-last function
    assert [i.op for i in size_fn.body] == [Op.CALL, Op.END]
    assert not any(i.op in (Op.MEMORY_SIZE, Op.MEMORY_GROW) for f in merged.funcs for i in f.body)
    # the program's __stack_pointer stays the one capsule keeps per fiber; the runtime's is renamed
    assert merged.names.globals[0] == "__stack_pointer"
    assert merged.names.globals[2] == "capsule_runtime.__stack_pointer"
    assert {e.name for e in merged.exports} >= {"_start", "write", "capsule_io", "memory"}
    assert not any(e.name.startswith("__imported_wasi") for e in merged.exports)

    store, ex = instantiate(encode(merged))
    assert ex["write"](store) == 2  # two fd_write calls reached the runtime, which counted them in its global
    assert ex["indirect"](store) == 40  # the program's table and global
    assert ex["capsule_io"](store) == 77  # the runtime's table (now table 1) and element segment
    assert ex["size"](store) == 1 and ex["grow"](store, 3) == 1003  # memory.size/grow went to the runtime
    mem = ex["memory"]
    assert bytes(mem.read(store, 16, 18)) == b"hi" and bytes(mem.read(store, 0x10000, 0x10002)) == b"RT"


def test_encode_round_trips_real_modules():
    data = _foreign_c_wasm().read_bytes()
    m = load(data)
    again = read_module(encode(m))
    assert [[(i.op, i.imm) for i in f.body] for f in again.funcs] == [[(i.op, i.imm) for i in f.body] for f in m.funcs]
    assert again.types == m.types and again.names.funcs == m.names.funcs
    assert [(d.mode, d.init) for d in again.datas] == [(d.mode, d.init) for d in m.datas]


@pytest.mark.parametrize(("program", "message"), [
    ('(module (import "env" "foo" (func)) (memory 1))', "imports env.foo, which capsule's WASI runtime"),
    ('(module (import "wasi_snapshot_preview1" "fd_nonsense" (func)) (memory 1))',
     "wasi_snapshot_preview1.fd_nonsense, which capsule's WASI runtime does not serve"),
    ('(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32) (result i32))) (memory 1))',
     r"fd_write as \[i32\] -> \[i32\], but capsule's WASI runtime serves it as \[i32 i32 i32 i32\]"),
    ('(module (import "env" "memory" (memory 1)))', "imports its memory"),
    ('(module (memory 1) (func (export "capsule_io")))', "exports 'capsule_io'"),
    ('(module (import "env" "g" (global i32)) (memory 1))', r"imports a global \(env.g\)"),
])
def test_merge_errors_name_the_problem(program, message):
    with pytest.raises(LinkError, match=message):
        link(wat(program), wat(RUNTIME_WAT))


def test_program_memory_must_end_where_the_runtime_starts():
    program = wat('(module (memory 3))')
    assert runtime_base(program) == 3 * WASM_PAGE
    with pytest.raises(LinkError, match="inside the program's initial memory"):
        link(program, wat(RUNTIME_WAT))  # its data sits at 0x10000, under the program's 3 pages


def test_memoryless_program_gets_a_memory():
    merged = link_program(wat('(module (func (export "_start")))'), wat(RUNTIME_WAT))
    assert merged.memories[0].limits.min == 2
    assert any(e.name == "memory" and e.kind == ExternKind.MEMORY for e in merged.exports)


# -- the real runtime ---------------------------------------------------------------------------------------
HELLO_WAT = r"""
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 8) "\40\00\00\00\0f\00\00\00")     ;; iovec: "hello from wat\n"
  (data (i32.const 16) "\50\00\00\00\0b\00\00\00")    ;; iovec: "to stderr\n" + size line below
  (data (i32.const 64) "hello from wat\n")
  (data (i32.const 80) "to stderr!\n")
  (func (export "_start")
    (local $n i32)
    ;; stdout, then memory.size as a digit (the program sees only its own 1 page), then stderr
    (drop (call $fd_write (i32.const 1) (i32.const 8) (i32.const 1) (i32.const 100)))
    (i32.store8 (i32.const 96) (i32.add (i32.const 48) (memory.size)))
    (i32.store8 (i32.const 97) (i32.const 10))
    (i32.store (i32.const 24) (i32.const 96))
    (i32.store (i32.const 28) (i32.const 2))
    (drop (call $fd_write (i32.const 1) (i32.const 24) (i32.const 1) (i32.const 100)))
    (drop (call $fd_write (i32.const 2) (i32.const 16) (i32.const 1) (i32.const 100)))
    ;; memory.grow lands past the runtime, and the new page is usable
    (local.set $n (memory.grow (i32.const 1)))
    (if (i32.le_u (local.get $n) (i32.const 1)) (then unreachable))
    (i32.store (i32.mul (local.get $n) (i32.const 65536)) (i32.const 42))
    (call $proc_exit (i32.add (i32.const 19)
                              (i32.load (i32.mul (local.get $n) (i32.const 65536))))))
)
"""


def run(wasm: Path, engine: str, **cfg) -> tuple[int, bytes, bytes]:  # type: ignore[no-untyped-def]
    out, err = io.BytesIO(), io.BytesIO()
    g = open_guest(wasm, engine)
    try:
        code = WasiHost(g, WasiConfig(stdout=out, stderr=err, **cfg)).run()
    finally:
        g.close()
    return code, out.getvalue(), err.getvalue()


def _fd_count(engine: str) -> int:
    """Open fds of this process, for the kernel engine (its maps and programs); wasmtime keeps engine-wide
    descriptors of its own for the life of the process, so there the count is not about the guest."""
    return len(os.listdir("/proc/self/fd")) if engine == "kernel" else 0


@pytest.mark.parametrize("engine", ENGINES)
def test_wat_program_calls_fd_write_itself(engine, tmp_path):
    wasm = tmp_path / "hello.wasm"
    wasm.write_bytes(wasmtime.wat2wasm(HELLO_WAT))
    before = _fd_count(engine)
    assert run(wasm, engine) == (61, b"hello from wat\n1\n", b"to stderr!\n")
    assert _fd_count(engine) == before


def test_standalone_runtime_is_cached_per_base(tmp_path):
    a = build_standalone_runtime(2 * WASM_PAGE)
    assert build_standalone_runtime(2 * WASM_PAGE) == a
    m = load(a.read_bytes())
    imports = [(i.module, i.name) for i in m.imports]
    assert ("env", "memory") in imports and all(mod in ("env", "capsule") for mod, _ in imports)
    assert not m.memories and m.datas[0].offset_expr[0].imm == 2 * WASM_PAGE  # type: ignore[index]
    exported = {e.name for e in m.exports}
    assert {"capsule_io", "capsule_alloc", "capsule_fs_add", "__imported_wasi_snapshot_preview1_fd_write",
            "__imported_wasi_snapshot_preview1_proc_raise"} <= exported
    with pytest.raises(Exception, match="multiple of the wasm page"):
        build_standalone_runtime(1000, tmp_path)


def test_every_wasi_libc_import_is_served():
    """Each function Debian's wasi-libc may import is exported by the runtime with the same type."""
    program = load(_foreign_c_wasm().read_bytes())
    merged = load(link_foreign(program))
    assert [(i.module, i.name) for i in merged.imports if i.module != "capsule"] == []
    names = Path("/usr/lib/wasm32-wasi/libc.imports").read_text().split()
    runtime = load(build_standalone_runtime(2 * WASM_PAGE).read_bytes())
    exported = {e.name for e in runtime.exports}
    assert [n for n in names if n not in exported] == []


# -- a C program built by plain clang + wasi-libc ------------------------------------------------------------
FOREIGN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    printf("argc=%d\n", argc);
    for (int i = 1; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    const char *g = getenv("GREETING");
    printf("GREETING=%s\n", g ? g : "(unset)");
    FILE *f = fopen("input.txt", "r");
    if (!f) {
        perror("input.txt");
        return 2;
    }
    char line[256];
    long sum = 0;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        sum += strtol(line, NULL, 10);
        printf("line %d: %s", n, line);
    }
    fclose(f);
    printf("lines=%d sum=%ld\n", n, sum);
    /* enough allocation that malloc grows memory many times (past the runtime's pages) */
    size_t total = 0;
    char **blocks = malloc(400 * sizeof *blocks);
    for (int i = 0; i < 400; i++) {
        size_t sz = 1000 + (size_t)i * 61;
        blocks[i] = malloc(sz);
        if (!blocks[i]) { printf("malloc failed\n"); return 3; }
        memset(blocks[i], i & 0xff, sz);
        total += sz;
    }
    unsigned check = 0;
    for (int i = 0; i < 400; i++)
        check = check * 31 + (unsigned char)blocks[i][i] + (unsigned char)blocks[i][999];
    for (int i = 0; i < 400; i += 2)
        free(blocks[i]);
    printf("allocated %zu check %u\n", total, check);
    f = fopen("out.txt", "w");
    fprintf(f, "written after %d lines\n", n);
    fclose(f);
    f = fopen("out.txt", "r");
    fgets(line, sizeof line, f);
    fclose(f);
    printf("readback: %s", line);
    printf("%.3f %g %e\n", 3.14159, 1e-5, 12345.678);
    fprintf(stderr, "to stderr %d\n", n);
    return argc == 3 ? 7 : 0;
}
"""
INPUT = b"10\n20\n-3\n"


def _source() -> Path:
    """FOREIGN_C in the cache, written atomically (tests in parallel workers build from it at once)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    src = CACHE / f"foreign-{hashlib.sha256(FOREIGN_C.encode()).hexdigest()[:16]}.c"
    if not src.exists():
        part = src.with_suffix(f".{os.getpid()}.tmp")
        part.write_text(FOREIGN_C)
        os.replace(part, src)
    return src


def _foreign_c_wasm() -> Path:
    """FOREIGN_C built the way any wasi-libc user would: clang --target=wasm32-wasi, libc's own crt1."""
    CACHE.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(FOREIGN_C.encode()).hexdigest()[:16]
    wasm = CACHE / f"foreign-{key}.wasm"
    if not wasm.exists():
        src = _source()
        part = wasm.with_suffix(f".{os.getpid()}.part")
        subprocess.run(["clang-19", "--target=wasm32-wasi", "-O2", str(src), "-o", str(part)], check=True)
        os.replace(part, wasm)
    return wasm


def _native(tmp: Path, args: list[str]) -> tuple[int, bytes, bytes, bytes]:
    key = hashlib.sha256(FOREIGN_C.encode()).hexdigest()[:16]
    exe = CACHE / f"foreign-{key}.native"
    if not exe.exists():
        src = _source()
        part = exe.with_name(exe.name + f".{os.getpid()}")
        build_native([src], part, ["-O2"])
        os.replace(part, exe)
    cwd = tmp / "native"
    cwd.mkdir()
    (cwd / "input.txt").write_bytes(INPUT)
    res = subprocess.run(["prog", *args], executable=str(exe), cwd=cwd, env={"GREETING": "hello there"},
                         capture_output=True, check=False, timeout=60)
    return res.returncode, res.stdout, res.stderr, (cwd / "out.txt").read_bytes()


def test_imports_are_wasi_libc_ones():
    m = load(_foreign_c_wasm().read_bytes())
    assert {i.module for i in m.imports} == {"wasi_snapshot_preview1"}
    assert m.export("capsule_io") is None and m.export("_start") is not None


def test_c_program_matches_native_under_wasmtime(tmp_path):
    """The reference engine, in process (the kernel run of the same program is ``capsule run`` below)."""
    args = ["one", "two words"]
    want = _native(tmp_path, args)
    (tmp_path / "input.txt").write_bytes(INPUT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, out, err = run(_foreign_c_wasm(), "wasmtime", args=["prog", *args], env=["GREETING=hello there"],
                         files=[(tmp_path / "input.txt", "/input.txt")], out_dir=out_dir)
    assert out.decode() == want[1].decode()
    assert (code, err) == (want[0], want[2]) == (7, b"to stderr 3\n")
    assert (out_dir / "out.txt").read_bytes() == want[3]


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capsule.cli", "run", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.requires_bpf
def test_capsule_run_in_the_kernel(tmp_path):
    """``capsule run foreign.wasm ARGS`` in the kernel: output, status and written files equal the native build's."""
    (tmp_path / "input.txt").write_bytes(INPUT)
    args = ["one", "two words"]
    want = _native(tmp_path, args)
    res = _cli(["--file", "input.txt", "--env", "GREETING=hello there", "--out", "out", str(_foreign_c_wasm()),
                *args], tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (want[0], want[1].decode(), want[2].decode())
    assert res.returncode == 7 and "argv[2]=two words" in res.stdout
    assert (tmp_path / "out" / "out.txt").read_bytes() == want[3]


@pytest.mark.requires_bpf
def test_capsule_run_names_an_import_it_cannot_serve(tmp_path):
    wasm = tmp_path / "needs_env.wasm"
    wasm.write_bytes(wasmtime.wat2wasm('(module (import "env" "host_thing" (func)) (memory 1) '
                                       '(func (export "_start")))'))
    res = _cli(["--engine", "wasmtime", str(wasm)], tmp_path)
    assert res.returncode == 1
    assert "needs_env.wasm" in res.stderr and "env.host_thing" in res.stderr and "does not serve" in res.stderr
