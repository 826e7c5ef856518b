"""Differential testing of the compiler: one C file, built once to wasm, run under wasmtime (the reference)
and in the kernel (capsule), every call compared.

A ``Pair`` holds both instances of one module. Calls go to both in the same order, so stateful programs
(a hash table, a bump allocator) stay in step. A call's outcome is its results (signed i32/i64, as capsule
returns them) or a trap, named by capsule's trap wording; the two outcomes must be equal.

wasmtime runs wasm on the calling thread's native stack, and the deep-recursion tests need far more than a
thread's default 8 MiB: every reference call runs on one worker thread created with a large stack.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import wasmtime

from capsule.compiler import Options, compile_module
from capsule.runtime import GuestTrap, Instance
from capsule.wasm import load
from tests.fds import bpf_fd_count as bpf_fds  # noqa: F401 - the differential tests count BPF fds with it

HERE = Path(__file__).parent
SOURCES = HERE / "differential"
CACHE = Path(os.environ.get("CAPSULE_TEST_CACHE", HERE.parents[1] / ".cache" / "tests")) / "diff"
CLANG = shutil.which("clang-19") or "clang-19"
#: freestanding C to a wasm32 module: every function exported under its C name, a name section kept
WASM_FLAGS = [
    "--target=wasm32",
    "-O2",
    "-nostdlib",
    "-mbulk-memory",
    "-Wl,--no-entry",
    "-Wl,--export-all",
    "-Wl,--max-memory=268435456",
]
REF_STACK = 512 << 20  # native stack of the reference thread
REF_WASM_STACK = 256 << 20  # wasmtime's limit on the wasm stack

# wasmtime's trap codes in capsule's (the wasm spec's) wording
_TRAP_NAMES = {
    "INTEGER_DIVISION_BY_ZERO": "integer divide by zero",
    "INTEGER_OVERFLOW": "integer overflow",
    "UNREACHABLE": "unreachable",
    "MEMORY_OUT_OF_BOUNDS": "out of bounds memory access",
    "HEAP_MISALIGNED": "out of bounds memory access",
    "TABLE_OUT_OF_BOUNDS": "undefined element",
    "INDIRECT_CALL_TO_NULL": "uninitialized element",
    "BAD_SIGNATURE": "indirect call type mismatch",
    "STACK_OVERFLOW": "call stack exhausted",
    "BAD_CONVERSION_TO_INTEGER": "invalid conversion to integer",
}

T = TypeVar("T")


def build(name: str, extra: Sequence[str] = ()) -> bytes:
    """``differential/<name>.c`` -> wasm bytes, cached by content (atomic writes: xdist workers share it)."""
    return build_source((SOURCES / f"{name}.c").read_text(), name, extra)


def build_source(text: str, name: str = "inline", extra: Sequence[str] = ()) -> bytes:
    """C source text -> wasm bytes (cached like ``build``)."""
    flags = [*WASM_FLAGS, *extra]
    key = hashlib.sha256((text + repr(flags)).encode()).hexdigest()[:16]
    out = CACHE / f"{name}-{key}.wasm"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            Path(tmp, "in.c").write_text(text)
            res = subprocess.run(
                [CLANG, *flags, f"{tmp}/in.c", "-o", f"{tmp}/out.wasm"], capture_output=True, text=True
            )
            if res.returncode:
                raise RuntimeError(f"clang-19 could not build {name}.c:\n{res.stderr}")
            os.replace(f"{tmp}/out.wasm", out)
    return out.read_bytes()


class _RefThread:
    """One long-lived thread with a big native stack, shared by every reference instance."""

    _pool: ThreadPoolExecutor | None = None
    _lock = threading.Lock()

    @classmethod
    def run(cls, fn: Callable[[], T]) -> T:
        with cls._lock:
            if cls._pool is None:
                old = threading.stack_size(REF_STACK)
                try:
                    cls._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wasmtime")
                    cls._pool.submit(lambda: None).result()  # start the thread while the size is in force
                finally:
                    threading.stack_size(old)
        return cls._pool.submit(fn).result()


@dataclass(frozen=True)
class Trapped:
    """A call's outcome when it trapped: the trap's wording and the guest backtrace (innermost first)."""

    message: str
    backtrace: tuple[str, ...]

    def __eq__(self, other: object) -> bool:  # backtraces are compared by the tests that care
        return isinstance(other, Trapped) and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)


Outcome = list[int] | Trapped


class Reference:
    """The module under wasmtime."""

    def __init__(self, wasm: bytes) -> None:
        def make() -> tuple[wasmtime.Store, wasmtime.Instance]:
            cfg = wasmtime.Config()
            # the engine refuses a wasm stack larger than the async stack, which the Config class cannot set
            from wasmtime import _bindings

            _bindings.wasmtime_config_async_stack_size_set(cfg.ptr(), REF_WASM_STACK + (1 << 20))
            cfg.max_wasm_stack = REF_WASM_STACK
            engine = wasmtime.Engine(cfg)
            store = wasmtime.Store(engine)
            return store, wasmtime.Instance(store, wasmtime.Module(engine, wasm), [])

        self.store, self.instance = _RefThread.run(make)
        self.exports = self.instance.exports(self.store)

    def call(self, name: str, *args: int) -> Outcome:
        func = self.exports[name]
        assert isinstance(func, wasmtime.Func)
        results = [str(t) for t in func.type(self.store).results]

        def go() -> Outcome:
            try:
                r = func(self.store, *args)
            except wasmtime.Trap as t:
                code = t.trap_code.name if t.trap_code is not None else "?"
                return Trapped(_TRAP_NAMES.get(code, code), tuple(f.func_name or "?" for f in t.frames))
            values = [] if r is None else list(r) if isinstance(r, list | tuple) else [r]
            return [_signed(v, t) for v, t in zip(values, results, strict=True)]

        return _RefThread.run(go)

    def write(self, addr: int, data: bytes) -> None:
        mem = self.exports["memory"]
        assert isinstance(mem, wasmtime.Memory)
        _RefThread.run(lambda: mem.write(self.store, data, addr))

    def read(self, addr: int, size: int) -> bytes:
        mem = self.exports["memory"]
        assert isinstance(mem, wasmtime.Memory)
        return _RefThread.run(lambda: bytes(mem.read(self.store, addr, addr + size)))


def _signed(v: Any, t: str) -> int:
    if isinstance(v, float):
        raise TypeError("the differential programs return integers only")
    if t == "i32":
        v &= 0xFFFF_FFFF
        return v - (1 << 32) if v >> 31 else v
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


class Kernel:
    """The module compiled by capsule and loaded into the kernel."""

    def __init__(self, wasm: bytes, options: Options | None = None) -> None:
        self.instance = Instance(compile_module(load(wasm), options))

    def call(self, name: str, *args: int, budget: int = 1 << 62) -> Outcome:
        try:
            return self.instance.call(name, *args, budget=budget)
        except GuestTrap as t:
            return Trapped(t.message, tuple(t.backtrace))

    def write(self, addr: int, data: bytes) -> None:
        self.instance.mem[addr : addr + len(data)] = data

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self.instance.mem[addr : addr + size])

    def close(self) -> None:
        self.instance.close()


class Pair:
    """One module under both runtimes; ``check`` runs a call on both and asserts the outcomes are equal."""

    def __init__(
        self, name: str, options: Options | None = None, extra: Sequence[str] = (), source: str | None = None
    ) -> None:
        self.name = name
        self.wasm = build(name, extra) if source is None else build_source(source, name, extra)
        self.ref = Reference(self.wasm)
        self.kernel = Kernel(self.wasm, options)

    def check(self, func: str, *args: int, budget: int = 1 << 62) -> Outcome:
        want = self.ref.call(func, *args)
        got = self.kernel.call(func, *args, budget=budget)
        assert got == want, f"{self.name}.{func}{args}: kernel {got}, wasmtime {want}"
        return got

    def value(self, func: str, *args: int) -> int:
        """``check`` for a function returning one value, which it returns (a trap fails the test)."""
        out = self.check(func, *args)
        assert isinstance(out, list) and len(out) == 1, f"{self.name}.{func}{args}: {out}"
        return out[0]

    def write(self, addr: int, data: bytes) -> None:
        self.ref.write(addr, data)
        self.kernel.write(addr, data)

    def same_memory(self, addr: int, size: int) -> bytes:
        a, b = self.ref.read(addr, size), self.kernel.read(addr, size)
        assert a == b, f"{self.name}: memory [{addr:#x}, +{size}) differs"
        return a

    @property
    def stats(self):  # type: ignore[no-untyped-def]
        return self.kernel.instance.stats

    def close(self) -> None:
        self.kernel.close()

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


