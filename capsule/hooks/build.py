"""Hook objects from what a user has: C/C++ sources, a wasm module, or an object ``capsule build --hook``
wrote; and the Lua observer (Lua 5.4.8 with ``capsule/guest/hook/lua_observer.c``).

Builds are cached twice: the wasm by the toolchain (``build_wasm(hook=True)``), the compiled object here
(``cache_dir("hooks")``), keyed by the module's bytes, the build options and the compiler's own sources, so
a second ``capsule attach`` of the same program only loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import write_object
from capsule.bpf.spec import ObjectSpec
from capsule.compiler import Options, compile_module
from capsule.compiler import hook_abi as h
from capsule.kernel.maps import possible_cpus
from capsule.sources import lua as lua_recipe
from capsule.toolchain.cache import cache_dir
from capsule.toolchain.guest import GUEST_DIR, build_wasm, is_source
from capsule.wasm import load

from .program import HookError

HOOK_STACK = 1 << 20  # a packet handler's software stack (a run's default is 16 MiB)
LUA_OBSERVER = GUEST_DIR / "hook" / "lua_observer.c"
LUA_UNITY = GUEST_DIR / "hook" / "lua_unity.c"  # Lua and the observer as one translation unit
# The Lua observer as one translation unit is ~380,000 BPF instructions, over the compiler's default budget
# for one program (where it would split): a hook must be one program, and the kernel takes up to 1,000,000.
LUA_PROGRAM_BUDGET = 600_000
COMPILER_DIR = Path(__file__).resolve().parent.parent / "compiler"


def hook_options(kind: str, **kw: object) -> Options:
    """Build options for a hook: a fiber per CPU of this machine and one for the host."""
    if kind not in h.HOOK_KINDS:
        raise HookError(f"no hook {kind!r} (there are: {', '.join(h.HOOK_KINDS)})")
    base = {"hook": kind, "fibers": max(4, possible_cpus() + 1), "stack_size": HOOK_STACK}
    return Options(**{**base, **kw})  # type: ignore[arg-type]


@cache
def _compiler_digest() -> str:
    d = hashlib.sha256()
    for p in sorted(COMPILER_DIR.glob("*.py")):
        d.update(p.name.encode() + b"\0" + p.read_bytes())
    return d.hexdigest()


def compile_hook(wasm: Path, options: Options) -> ObjectSpec:
    """The module compiled for its hook (cached)."""
    data = wasm.read_bytes()
    key = hashlib.sha256(json.dumps([_compiler_digest(), repr(options)]).encode() + data).hexdigest()[:32]
    root = cache_dir("hooks")
    obj = root / f"{key}.bpf.o"
    if obj.is_file():
        return read_object(obj)
    spec = compile_module(load(data), options)
    root.mkdir(parents=True, exist_ok=True)
    part = obj.with_suffix(f".{os.getpid()}.part")
    write_object(spec, part)
    os.replace(part, obj)
    return spec


def hook_object(kind: str, programs: Sequence[Path], cflags: Sequence[str] = (), **options: object) -> ObjectSpec:
    """A hook object for ``kind`` from C/C++ sources, one .wasm, or one .bpf.o built with ``--hook``."""
    if not programs:
        raise HookError("no program given")
    for p in programs:
        if not p.is_file():
            raise HookError(f"{p}: no such file")
    first = programs[0]
    if all(is_source(p) for p in programs):
        wasm = build_wasm(list(programs), ["-O2", *cflags], hook=True).wasm
        return compile_hook(wasm, hook_options(kind, **options))
    if len(programs) > 1:
        raise HookError("give C/C++ sources, or one .wasm or .bpf.o")
    if first.suffix == ".wasm":
        return compile_hook(first, hook_options(kind, **options))
    spec = read_object(first)
    section = spec.extra_sections.get(h.HOOK_SECTION)
    if section is None:
        raise HookError(f"{first} is not a hook program (build it with capsule build --hook {kind})")
    built = json.loads(section)["hook"]
    if built != kind:
        raise HookError(f"{first} was built for {built}, not {kind}")
    return spec


def lua_observer_wasm() -> Path:
    """Lua 5.4.8 (its core and libraries, not the ``lua`` program) with the observer, as a hook module: one
    translation unit (``lua_unity.c``, Lua's own ``onelua.c``), so that clang inlines the calls between Lua's
    files, each of which would otherwise be a region transition per packet (a parse-only packet: 13.2 us
    with separate files, 10.2 us as one, in test runs; docs/HOOKS.md)."""
    tree = lua_recipe.fetch()
    flags = [*lua_recipe.LUA_CFLAGS, *lua_recipe.LUA_WASM_FLAGS, f"-I{tree}"]
    return build_wasm([tree / lua_recipe.SHIM, LUA_UNITY], flags, hook=True).wasm


def lua_observer(kind: str) -> ObjectSpec:
    return compile_hook(lua_observer_wasm(), hook_options(kind, program_budget=LUA_PROGRAM_BUDGET))
