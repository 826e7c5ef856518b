"""wasm32-wasi modules built by another toolchain (wasi-sdk, Rust, by hand): merged with capsule's standalone
WASI runtime so they serve WASI inside themselves, like a program capsule built (``capsule.wasm.link``)."""

from __future__ import annotations

from capsule.toolchain.guest import build_standalone_runtime
from capsule.wasm import ExternKind, Module, load
from capsule.wasm.link import link_program, runtime_base
from capsule.wasm.link_encode import encode


def has_runtime(module: Module) -> bool:
    """Whether the module carries capsule's WASI runtime already (it exports the host protocol's capsule_io)."""
    return any(e.name == "capsule_io" and e.kind == ExternKind.FUNC for e in module.exports)


def link_foreign(program: Module) -> bytes:
    """A module built without capsule's runtime, merged with the standalone runtime: the encoded module.

    Raises WasmError (LinkError) for an import the runtime does not serve, ToolchainError when the runtime
    cannot be built."""
    runtime = load(build_standalone_runtime(runtime_base(program)).read_bytes())
    return encode(link_program(program, runtime))


def with_runtime(data: bytes) -> tuple[bytes, Module]:
    """The module both engines run, encoded and read: ``data`` as is when it carries the runtime, else merged
    with it (and re-read from its encoding, so that both engines run exactly these bytes)."""
    module = load(data)
    if has_runtime(module):
        return data, module
    merged = link_foreign(module)
    return merged, load(merged)
