"""The engines a wasm32-wasi program runs on, behind one call: the kernel (compiled to BPF), and wasmtime, the
reference the kernel's results are checked against (differential tests, ``capsule run --engine wasmtime``,
the C demo's ``engine``).

``WasmtimeGuest`` runs the same module in wasmtime with the capsule intrinsics served from Python; both
engines are ``capsule.runtime.wasi_host.Guest``s, so ``WasiHost`` serves them with the same code, which is what
makes the wasmtime run a faithful reference for the kernel run.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from capsule.compiler import Options, compile_module
from capsule.ints import signed
from capsule.runtime.errors import GuestExit, GuestTrap
from capsule.runtime.instance import Instance
from capsule.runtime.wasi_host import Guest, KernelGuest, WasiError
from capsule.toolchain.clang import ToolchainError
from capsule.toolchain.foreign import with_runtime

if TYPE_CHECKING:
    import wasmtime

ENGINES = ("kernel", "wasmtime")


class _Unwind(Exception):
    """capsule.unwind under wasmtime: caught by the nearest invoke_* on the Python stack."""


class WasmtimeGuest:
    """The reference engine: the same module under wasmtime, the four capsule intrinsics from Python."""

    CLOCKS: Sequence[Callable[[], int]] = (time.time_ns, time.monotonic_ns, time.process_time_ns,
                                           time.thread_time_ns)

    def __init__(self, wasm: bytes | Path) -> None:
        import wasmtime

        self._wt = wasmtime
        data = wasm.read_bytes() if isinstance(wasm, Path) else wasm
        self.engine = wasmtime.Engine()
        self.store = wasmtime.Store(self.engine)
        self.module = wasmtime.Module(self.engine, data)
        linker = wasmtime.Linker(self.engine)
        self._service: Callable[[], None] = lambda: None
        self._rng = random.Random(os.urandom(16))
        i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
        linker.define_func("capsule", "yield", wasmtime.FuncType([], []), lambda: self._service())
        linker.define_func("capsule", "exit", wasmtime.FuncType([i32], []), self._exit)
        linker.define_func("capsule", "clock_ns", wasmtime.FuncType([i32], [i64]), self._clock)
        linker.define_func("capsule", "random", wasmtime.FuncType([], [i32]), self._random)
        linker.define_func("capsule", "unwind", wasmtime.FuncType([], []), self._unwind)
        for imp in self.module.imports:
            # setjmp/longjmp, see guest/crt/sjlj.c
            if imp.module == "env" and imp.name and imp.name.startswith("invoke_") and \
                    isinstance(imp.type, wasmtime.FuncType):
                linker.define_func("env", imp.name, imp.type, self._invoker(len(imp.type.results)))
            elif imp.module != "capsule":
                raise WasiError(f"the module imports {imp.module}.{imp.name}: a program built by capsule "
                                "imports only capsule.yield/exit/clock_ns/random/unwind and env.invoke_*")
        self.instance = linker.instantiate(self.store, self.module)
        exports = self.instance.exports(self.store)
        memory = exports["memory"]
        if not isinstance(memory, wasmtime.Memory):
            raise WasiError("the module's export 'memory' is not a memory")
        self.memory = memory
        self._exports = exports

    def close(self) -> None:
        pass

    def _exit(self, code: int) -> None:
        raise GuestExit(code)

    def _unwind(self) -> None:
        raise _Unwind()

    def _invoker(self, nresults: int) -> Callable[..., object]:
        """env.invoke_*: call table[fn](args); a longjmp (capsule.unwind) inside returns here as if normally."""

        def invoke(fn: int, *args: int) -> object:
            table = self._exports["__indirect_function_table"]
            assert isinstance(table, self._wt.Table)  # a module that imports invoke_* exports its table
            callee = table.get(self.store, fn)
            if callee is None:
                raise GuestTrap(f"invoke of table element {fn}, which is null", [])
            try:
                return callee(self.store, *args)
            except _Unwind:
                return None if nresults == 0 else (0 if nresults == 1 else [0] * nresults)

        return invoke

    def _clock(self, clock: int) -> int:
        return self.CLOCKS[clock]() if 0 <= clock < len(self.CLOCKS) else 0

    def _random(self) -> int:
        return signed(self._rng.getrandbits(32), 32)

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self.memory.read(self.store, addr, addr + size))

    def write(self, addr: int, data: bytes) -> None:
        self.memory.write(self.store, data, addr)

    def has_export(self, name: str) -> bool:
        try:
            self._exports[name]
        except KeyError:
            return False
        return True

    def _func(self, name: str) -> wasmtime.Func:
        f = self._exports[name]
        if not isinstance(f, self._wt.Func):
            raise WasiError(f"the module's export {name!r} is not a function")
        return f

    def call(self, name: str, *args: int) -> int:
        res = self._func(name)(self.store, *args)
        return 0 if res is None else int(res)

    def run_start(self, service: Callable[[], None]) -> int | None:
        self._service = service
        try:
            self._func("_start")(self.store)
        except GuestExit as e:
            return e.code
        except self._wt.Trap as e:
            raise GuestTrap(e.message.splitlines()[0] if e.message else "trap", []) from None
        except self._wt.WasmtimeError as e:
            cause = e.__cause__ or e.__context__
            if isinstance(cause, GuestExit):
                return cause.code
            raise
        return None


def open_guest(wasm: Path, engine: str = "kernel", options: Options | None = None) -> Guest:
    """Load a wasm32-wasi module on ``engine`` ("kernel": compiled to BPF; "wasmtime": the reference). A module
    built by capsule carries the WASI runtime already; any other (built by another toolchain, importing
    wasi_snapshot_preview1 itself) is merged with capsule's standalone runtime first
    (``capsule.toolchain.foreign``)."""
    if engine not in ENGINES:
        raise WasiError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
    try:
        data, module = with_runtime(wasm.read_bytes())
    except ToolchainError as e:  # the standalone runtime does not build: the host cannot serve the module
        raise WasiError(str(e)) from None
    if engine == "wasmtime":
        return WasmtimeGuest(data)
    return KernelGuest(Instance(compile_module(module, options)))
