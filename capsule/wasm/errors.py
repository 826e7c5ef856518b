"""One exception family for everything that can go wrong with a WebAssembly module.

The split follows the spec's own: *malformed* means the bytes do not decode (binary format), *invalid* means
they decode but break a typing rule (validation), and *unsupported* means the module uses a feature capsule
does not implement (SIMD, threads, exceptions, memory64, GC, ...). Callers that only care that a module was
refused catch ``WasmError``; the spec testsuite driver checks the exact subclass.

Every error carries where it happened: the function (index, and name when the name section gives one) and the
absolute byte offset in the module. The location is filled in as the error travels up: the instruction decoder
knows the offset, the function loop knows the index, the module reader knows the names.
"""

from __future__ import annotations


class WasmError(ValueError):
    """Base of all capsule.wasm errors; ``str()`` gives ``kind: message (function 3 "fib", offset 0x1a2)``."""

    kind = "error"

    def __init__(
        self, message: str, offset: int | None = None, func: int | None = None, func_name: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.func = func
        self.func_name = func_name

    def where(self) -> str:
        parts = []
        if self.func is not None:
            parts.append(f"function {self.func}" + (f' "{self.func_name}"' if self.func_name else ""))
        if self.offset is not None:
            parts.append(f"offset {self.offset:#x}")
        return f" ({', '.join(parts)})" if parts else ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}{self.where()}"


class MalformedError(WasmError):
    """The bytes are not a WebAssembly binary (bad LEB128, unknown opcode, truncated section, ...)."""

    kind = "malformed"


class InvalidError(WasmError):
    """The module decodes but does not validate (type mismatch, unknown index, bad limits, ...)."""

    kind = "invalid"


class UnsupportedError(WasmError):
    """The module uses a WebAssembly feature capsule does not implement (SIMD, threads, GC, ...)."""

    kind = "unsupported"
