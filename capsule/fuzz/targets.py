"""What ``capsule fuzz`` feeds mutated inputs to, and what each part may answer.

A target takes one input and runs it as far through capsule as it goes: until a stage refuses it with the error
that stage documents (an *outcome*, counted), or to the end. Anything else a stage raises is a failure, and so
is a verifier rejection of code capsule compiled itself (the compiler must only emit what the kernel accepts).

* ``wasm``: the reader and validator, the compiler, the ELF writer and, when it compiles, the kernel (load,
  instantiate, each export called with zero arguments on a small budget).
* ``elf``: a BPF ELF object through the reader, the disassembler, the optimizer (without the kernel check) and
  the writer, then the loader (BTF, maps, each program: what ``capsule verify`` does) when its maps are small.
* ``meta``: a capsule-compiled object whose ``.capsule.meta``, data, maps or programs were changed, through the
  host (``Instance``): refused with one error, or instantiated and called.
"""

from __future__ import annotations

import copy
import random
from functools import cache
from pathlib import Path

from capsule.bpf.btf import BTFError
from capsule.bpf.disasm import disassemble_object
from capsule.bpf.elf import ObjectError, read_object
from capsule.bpf.elf_write import WriteError, object_bytes
from capsule.bpf.spec import ObjectSpec
from capsule.bpf.uapi import MapType, ProgType
from capsule.compiler import abi, compile_module
from capsule.kernel.collection import create_maps, load_object_btf, load_program
from capsule.kernel.errors import BPFError, LoadError
from capsule.opt.pipeline import CodeOutsideProgramsError, make_passes, optimize_object, refuse_code_outside_programs
from capsule.opt.rewrite import RewriteError
from capsule.runtime.errors import CallError, GuestExit, GuestRejected, GuestTrap, Pending
from capsule.runtime.instance import Instance
from capsule.wasm import ExternKind, UnsupportedError, WasmError, load

from .mutate import mutate, mutate_json

# small modules that reach memory, data, tables, globals, calls, loops, recursion, floats and memory.grow
SEED_MODULES = tuple(bytes.fromhex(h) for h in (
    "0061736d01000000010a026000017f60017f017f03030200010404017000020504010101020606017f0141070b07090201660000016700"
    "010907010041000b01000a1802070041102802000b0e00230020006a240041001100000b0b0b010041100b0568656c6c6f",
    "0061736d0100000001100360017e017e60017f017c60017f017f0304030001020503010001071403036669620000046c6f6f70000103"
    "6d656d00020a61031c002000420254047e200005200042017d1000200042027d10007c0b0b3801017c024003402000450d0120012000"
    "b7a02101200041fcff03712000360200200041016b21000c000b0b200144000000000000e03fa20b0900200040001a3f000b",
))
MAX_WASM_SEED = 64 << 10  # bigger modules take seconds to compile: too slow an input
MAX_ELF_SEED = 256 << 10
MAX_MAP_BYTES = 64 << 20  # an object whose maps would take more kernel memory is not loaded
CALL_BUDGET = 20_000  # region transitions per call of an export


class KernelRejected(Exception):
    """The kernel refused code capsule compiled: a failure of the compiler, not of the input."""


class Target:
    name = ""

    def __init__(self, kernel: bool, extra: list[Path]) -> None:
        self.kernel = kernel
        self.extra = extra

    def seeds(self) -> list[bytes]:
        raise NotImplementedError

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        return mutate(data, rng)

    def run(self, data: bytes) -> str:
        """The outcome's name; raises on a failure."""
        raise NotImplementedError


def _files(dirs: list[Path], suffix: str, limit: int) -> list[bytes]:
    out = []
    for d in dirs:
        for p in sorted(d.rglob(f"*{suffix}") if d.is_dir() else [d]):
            if p.name.endswith(suffix) and p.is_file() and p.stat().st_size <= limit:
                out.append(p.read_bytes())
    return out


@cache
def compiled_seed(index: int) -> ObjectSpec:
    return compile_module(load(SEED_MODULES[index]))


def call_exports(inst: Instance) -> int:
    """Call every export that takes only numbers with zeros, for at most CALL_BUDGET transitions each."""
    calls = 0
    for e in inst.meta.exports:
        if e.kind != ExternKind.FUNC or inst.meta.funcs[e.index].entry is None:
            continue
        params, _ = inst.func_types(e.index)
        try:
            res = inst.start(e.index, [0] * len(params), budget=CALL_BUDGET)
            if isinstance(res, Pending):
                inst.reset(0)
        except (GuestTrap, GuestExit, CallError):
            inst.reset(0)
        calls += 1
    return calls


def run_instance(spec: ObjectSpec) -> str:
    try:
        inst = Instance(spec)
    except GuestRejected as e:
        raise KernelRejected(str(e)) from e
    except GuestTrap:
        return "trapped at instantiation"
    with inst:
        call_exports(inst)
    return "ran"


class WasmTarget(Target):
    name = "wasm"

    def seeds(self) -> list[bytes]:
        return list(SEED_MODULES) + _files(self.extra, ".wasm", MAX_WASM_SEED)

    def run(self, data: bytes) -> str:
        try:
            module = load(data)
        except UnsupportedError:
            return "unsupported feature"
        except WasmError:
            return "malformed or invalid"
        try:
            spec = compile_module(module)
        except UnsupportedError:  # CompileError included
            return "not compiled"
        object_bytes(spec)
        if not self.kernel:
            return "compiled"
        try:
            return run_instance(spec)
        except CallError:  # an imported global without a value, a fiber it has no room for
            return "not instantiated"


def _maps_small(spec: ObjectSpec) -> bool:
    total = 0
    for ms in spec.maps.values():
        if ms.type in (MapType.ARENA, MapType.RINGBUF, MapType.PERF_EVENT_ARRAY):
            continue  # memory committed on use, or a fixed small size
        total += (ms.key_size + ms.value_size + 64) * ms.max_entries
    return total <= MAX_MAP_BYTES


class ElfTarget(Target):
    name = "elf"

    def seeds(self) -> list[bytes]:
        return [object_bytes(compiled_seed(i)) for i in range(len(SEED_MODULES))] + \
            _files(self.extra, ".o", MAX_ELF_SEED)

    def run(self, data: bytes) -> str:
        try:
            spec = read_object(data)
        except (ObjectError, BTFError):
            return "not an object"
        disassemble_object(spec, "input.o")
        outcome = "read"
        try:
            refuse_code_outside_programs(spec)
            result = optimize_object(copy.deepcopy(spec), make_passes(), None)
            read_object(object_bytes(result.spec))
            outcome = "optimised"
        except CodeOutsideProgramsError:
            pass
        except RewriteError:  # code the optimizer cannot take apart (a jump into an ld_imm64, a register r11)
            outcome = "not optimisable"
        except WriteError:  # what the writer cannot express yet (extern variables): one clear error
            outcome = "not writable"
        if self.kernel and _maps_small(spec):
            outcome = self._load(spec) or outcome
        return outcome

    @staticmethod
    def _load(spec: ObjectSpec) -> str | None:
        try:
            btf = load_object_btf(spec)
        except BPFError:
            return "btf refused"
        try:
            maps = create_maps(spec, btf)
        except (BPFError, LoadError):
            if btf is not None:
                btf.close()
            return "maps refused"
        loaded = 0
        try:
            for ps in spec.programs.values():
                try:
                    load_program(ps, maps, btf).close()
                    loaded += 1
                except (BPFError, LoadError):
                    pass
        finally:
            for m in maps.values():
                m.close()
            if btf is not None:
                btf.close()
        return "loaded" if loaded else "programs refused"


class MetaTarget(Target):
    """Inputs are whole objects (a failing one runs again with ``capsule run``/``call``), changed where the host
    reads them: mostly the metadata, sometimes the data, a map's shape or a program's type."""

    name = "meta"

    def seeds(self) -> list[bytes]:
        return [object_bytes(compiled_seed(i)) for i in range(len(SEED_MODULES))]

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        spec = read_object(data)
        sections = spec.extra_sections
        choice = rng.random()
        if choice < 0.6:
            sections[abi.META_SECTION] = mutate_json(sections[abi.META_SECTION], rng)
        elif choice < 0.75:
            sections[abi.META_SECTION] = mutate(sections[abi.META_SECTION], rng)
        elif choice < 0.85:
            sections[abi.DATA_SECTION] = mutate(sections.get(abi.DATA_SECTION, b"") or b"\0", rng)
        elif choice < 0.95:
            name = rng.choice(sorted(spec.maps))
            field = rng.choice(["max_entries", "map_extra", "flags", "key_size", "value_size"])
            value = rng.choice([0, 1, 16, 1 << 20, 1 << 31, (1 << 32) - 1])
            changed = copy.copy(spec.maps[name])
            setattr(changed, field, value)
            spec.maps[name] = changed
        else:
            ps = spec.programs[rng.choice(sorted(spec.programs))]
            ps.type = rng.choice([ProgType.XDP, ProgType.SOCKET_FILTER, ProgType.SYSCALL, ProgType.SCHED_CLS])
        return object_bytes(spec)

    def run(self, data: bytes) -> str:
        try:
            spec = read_object(data)
        except (ObjectError, BTFError):
            return "not an object"
        if not self.kernel:
            return "read"
        try:
            return run_instance(spec)
        except CallError:  # the host's own checks (the metadata, the object's shape, calls)
            return "refused"
        except (BPFError, LoadError):  # the kernel refused a map or program the host let through
            return "kernel refused"


TARGETS: dict[str, type[Target]] = {t.name: t for t in (WasmTarget, ElfTarget, MetaTarget)}
