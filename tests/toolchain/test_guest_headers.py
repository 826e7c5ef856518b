"""The guest's headers: its include path is capsule's headers, libc++, clang's own and wasi-libc, never the host's
``/usr/include``; ``<pthread.h>`` is capsule's; a header only glibc has fails with clang's "file not found" and
a note saying where the guest's headers come from; and the libc layer (``capsule/guest/libc``) does what its
headers document, on both engines."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest

from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.testing.engines import open_guest
from capsule.toolchain.clang import ToolchainError, tool
from capsule.toolchain.guest import GUEST_DIR, GUEST_INCLUDE, HEADER_NOTE, WASI_INCLUDE, build_wasm, wasm_flags

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


@pytest.mark.parametrize("cxx", [False, True], ids=["c", "c++"])
def test_include_path_has_no_host_directories(cxx: bool) -> None:
    res = subprocess.run([tool("clang++-19" if cxx else "clang-19"), *wasm_flags(cxx), "-E", "-v", "-x",
                          "c++" if cxx else "c", "/dev/null", "-o", "/dev/null"], capture_output=True, text=True,
                         check=True)
    search = re.search(r"#include <\.\.\.> search starts here:\n(.*?)End of search list", res.stderr, re.S)
    assert search is not None
    dirs = [Path(line.strip()) for line in search.group(1).splitlines()]
    clang_own = [d for d in dirs if "clang" in d.parts and "include" in d.parts]  # stddef.h, stdarg.h, ...
    assert len(clang_own) == 1
    libcxx = [WASI_INCLUDE / "c++" / "v1"] if cxx else []
    assert dirs == [GUEST_DIR / "crt", GUEST_INCLUDE, *libcxx, *clang_own, WASI_INCLUDE]


def test_pthread_h_is_capsules(tmp_path: Path) -> None:
    src = tmp_path / "t.c"
    src.write_text("#include <pthread.h>\n#ifndef CAPSULE_PTHREAD_H\n#error not capsule's pthread.h\n#endif\n"
                   "int main(void) { pthread_t t; return pthread_create(&t, 0, 0, 0) == 0; }\n")
    assert build_wasm([src], cache=tmp_path / "cache").wasm.is_file()


@pytest.mark.parametrize("header", ["execinfo.h", "obstack.h"])
def test_glibc_only_header_is_not_found(header: str, tmp_path: Path) -> None:
    assert (Path("/usr/include") / header).is_file()  # the host has it: the old search path would have found it
    src = tmp_path / "t.c"
    src.write_text(f"#include <{header}>\nint main(void) {{ return 0; }}\n")
    with pytest.raises(ToolchainError) as e:
        build_wasm([src], cache=tmp_path / "cache")
    assert f"fatal error: '{header}' file not found" in str(e.value)
    assert str(e.value).endswith(HEADER_NOTE)


EXPECTED = """\
getpid 1
system -1? 1 ENOSYS? 1, system(NULL) 0
getpagesize 65536
chmod 0, missing -1 ENOENT? 1
realpath /dir/file.txt
realpath /dir/file.txt
realpath of root /
realpath missing NULL ENOENT? 1
realpath through a file NULL ENOTDIR? 1
pthread_create EAGAIN? 1
join self EDEADLK? 1, equal 1
mutex lock 0 trylock EBUSY? 1 relock EDEADLK? 1 unlock 0 unlock again EPERM? 1
recursive 0 0 busy-destroy EBUSY? 1 unlock 0 0 destroy 0
cond signal 0 wait EDEADLK? 1
timedwait ETIMEDOUT? 1
waited out the deadline? 1
once ran 1 time(s)
keys 1 two NULL, delete 0, deleted set EINVAL? 1
rwlock read 0 0 write EDEADLK? 1 unlock 0 0 write 0 tryread EBUSY? 1
fesetround nearest 0 upward fails? 1 downward fails? 1 mode 1
signal 1
getrusage 0 clock 1
malloc_usable_size >= 10? 1
"""


@pytest.mark.parametrize("engine", ["wasmtime", pytest.param("kernel", marks=pytest.mark.requires_bpf)])
def test_libc_layer(engine: str, tmp_path: Path) -> None:
    wasm = build_wasm([PROGRAMS / "libc_layer.c"]).wasm
    out, err = io.BytesIO(), io.BytesIO()
    (tmp_path / "root").mkdir()
    config = WasiConfig(args=["libc_layer"], dirs=[(tmp_path / "root", "/")], stdout=out, stderr=err)
    guest = open_guest(wasm, engine)
    try:
        code = WasiHost(guest, config).run()
    finally:
        guest.close()
    assert (code, err.getvalue()) == (0, b"")
    assert out.getvalue().decode() == EXPECTED


def test_a_program_defining_a_libc_layer_function_keeps_its_own(tmp_path: Path) -> None:
    """The layer is an archive: a program's own system() (Lua's shim has one) wins, without a duplicate symbol."""
    src = tmp_path / "own.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\nint system(const char *c) { return 42; }\n'
                   'int main(void) { printf("%d\\n", system("x")); return 0; }\n')
    out = io.BytesIO()
    guest = open_guest(build_wasm([src], cache=tmp_path / "cache").wasm, "wasmtime")
    try:
        assert WasiHost(guest, WasiConfig(args=["own"], stdout=out)).run() == 0
    finally:
        guest.close()
    assert out.getvalue() == b"42\n"
