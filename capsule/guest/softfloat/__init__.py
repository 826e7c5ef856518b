"""capsule's soft-float library: every wasm f32/f64 operation as a self-contained global BPF function.

BPF has no floating point, so the compiler lowers a float instruction to a BPF call of one of these functions.
``softfloat.c`` (next to this file, its numeric core in ``softfloat_core.h``) is the source; it is compiled
with clang-19 on first use and cached by content hash, and each global function is lifted out of the object's
``.text`` with its BTF prototype:

    lib = softfloat.library()
    f = lib["capsule_f64_add"]        # SoftFloatFunc: name, params ("a", "b"), insns
    type_id = softfloat.add_to_btf(btf, f)   # FUNC_PROTO(u64 a, u64 b) -> u64 + FUNC (global), for func_info

Calling convention: arguments in r1..r5 and the result in r0, all ``unsigned long long``; an f32 or i32 is passed
and returned zero-extended (an i32 source may carry garbage above bit 31: the functions mask it). The functions
call nothing (no helpers, no other functions), touch no maps and use at most a few bytes of stack, so each one is
a global subprogram the verifier checks once, on its own.

``WASM_OPS`` maps each wasm mnemonic the library implements to its function. The trapping float-to-int
conversions (``i32.trunc_f32_s`` ...) map to their saturating function for the value; ``TRAP_CHECKS`` names the
function that returns 1 when the conversion may proceed and 0 when it must trap (NaN or out of range).
neg/abs/copysign are not in the library: they are bit operations (flip, clear, or copy the sign bit).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from capsule.bpf.btf import BTF
from capsule.bpf.btf_types import Func, FuncProto, Linkage
from capsule.bpf.insn import Insn, decode, slot_offsets
from capsule.bpf.opcodes import CALL, CALLX, CLASS_MASK, EXIT, GOTOL, Class
from capsule.toolchain.cache import cache_dir
from capsule.toolchain.clang import ToolchainError, bpf_cflags, clang

SOURCE = Path(__file__).with_name("softfloat.c")
MCPU = "v4"


class SoftFloatError(Exception):
    """The library could not be built, or its object does not have the shape the compiler relies on."""


def _wasm_ops() -> dict[str, str]:
    ops: dict[str, str] = {}
    for t in ("f32", "f64"):
        for op in "add sub mul div sqrt min max ceil floor trunc nearest eq ne lt gt le ge".split():
            ops[f"{t}.{op}"] = f"capsule_{t}_{op}"
        for i in ("i32", "i64"):
            for s in ("s", "u"):
                ops[f"{t}.convert_{i}_{s}"] = f"capsule_{t}_convert_{i}_{s}"
                ops[f"{i}.trunc_sat_{t}_{s}"] = f"capsule_{t}_trunc_sat_{i}_{s}"
                ops[f"{i}.trunc_{t}_{s}"] = f"capsule_{t}_trunc_sat_{i}_{s}"
    ops["f64.promote_f32"] = "capsule_f64_promote_f32"
    ops["f32.demote_f64"] = "capsule_f32_demote_f64"
    return ops


WASM_OPS: dict[str, str] = _wasm_ops()
"""wasm mnemonic -> library function computing its value."""

TRAP_CHECKS: dict[str, str] = {
    f"{i}.trunc_{t}_{s}": f"capsule_{t}_trunc_{i}_{s}_ok"
    for t in ("f32", "f64")
    for i in ("i32", "i64")
    for s in ("s", "u")
}
"""trapping wasm conversion -> function returning 1 if it may proceed, 0 if it traps (BAD_CONVERSION or
INT_OVERFLOW: NaN is "invalid conversion to integer", an out-of-range value "integer overflow")."""

FUNCTION_NAMES: tuple[str, ...] = tuple(sorted(set(WASM_OPS.values()) | set(TRAP_CHECKS.values())))


@dataclass(frozen=True)
class SoftFloatFunc:
    """One library function: its instructions (self-contained: no calls, every jump inside) and parameters."""

    name: str
    params: tuple[str, ...]
    insns: tuple[Insn, ...]

    @property
    def arity(self) -> int:
        return len(self.params)


@dataclass(frozen=True)
class SoftFloatLibrary:
    object_path: Path
    functions: dict[str, SoftFloatFunc]

    def __getitem__(self, name: str) -> SoftFloatFunc:
        return self.functions[name]

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def for_wasm_op(self, mnemonic: str) -> SoftFloatFunc:
        return self.functions[WASM_OPS[mnemonic]]


def cflags(mcpu: str = MCPU) -> list[str]:
    return bpf_cflags(mcpu) + ["-Wextra", "-Werror"]


def build(out_dir: Path | None = None, mcpu: str = MCPU) -> Path:
    """Compile softfloat.c (once per content, flags and clang version) and return the object's path; ``mcpu``
    "v3" for kernels without cpu v4 (the compiler's ``Options(cpu=3)``)."""
    out_dir = out_dir or cache_dir("softfloat")
    cc = clang()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    sources = b"".join(p.read_bytes() for p in [SOURCE, *sorted(SOURCE.parent.glob("*.h"))])
    key = hashlib.sha256(sources + repr(cflags(mcpu)).encode() + version.encode()).hexdigest()[:20]
    out = out_dir / f"softfloat-{key}.o"
    if out.exists():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    res = subprocess.run([cc, *cflags(mcpu), "-c", str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
    if res.returncode:
        tmp.unlink(missing_ok=True)
        raise ToolchainError(f"clang-19 could not compile {SOURCE}:\n{res.stderr.rstrip()}")
    os.replace(tmp, out)  # atomic: parallel builders race harmlessly
    return out


def extract(obj: bytes) -> dict[str, SoftFloatFunc]:
    """Lift every global function out of a compiled library object, checking it is self-contained."""
    elf = ELFFile(io.BytesIO(obj))
    text = elf.get_section_by_name(".text")
    symtab = elf.get_section_by_name(".symtab")
    btf_sec = elf.get_section_by_name(".BTF")
    if text is None or not isinstance(symtab, SymbolTableSection) or btf_sec is None:
        raise SoftFloatError("the library object lacks .text, .symtab or .BTF")
    if elf.get_section_by_name(".rel.text") is not None:
        raise SoftFloatError("library functions must not reference data or other functions (.rel.text exists)")
    btf = BTF.parse(btf_sec.data())
    data = text.data()
    text_idx = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".text")
    out: dict[str, SoftFloatFunc] = {}
    for sym in symtab.iter_symbols():
        if sym["st_info"]["type"] != "STT_FUNC" or sym["st_shndx"] != text_idx:
            continue
        if sym["st_info"]["bind"] != "STB_GLOBAL":
            continue
        name, start, size = sym.name, sym["st_value"], sym["st_size"]
        insns = decode(data[start : start + size])
        _check_self_contained(name, insns)
        func = btf.type_by_id(btf.find_id(name))
        assert isinstance(func, Func)
        if func.linkage != Linkage.GLOBAL:
            raise SoftFloatError(f"{name} is not a global function in BTF")
        proto = btf.type_by_id(func.type)
        assert isinstance(proto, FuncProto)
        for p in proto.params:
            if btf.size_of(p.type) != 8:
                raise SoftFloatError(f"{name}: parameter {p.name} is not 64-bit")
        out[name] = SoftFloatFunc(name, tuple(p.name for p in proto.params), tuple(insns))
    missing = set(FUNCTION_NAMES) - set(out)
    if missing:
        raise SoftFloatError(f"the library lacks {', '.join(sorted(missing))}")
    return out


def _check_self_contained(name: str, insns: list[Insn]) -> None:
    """No calls, and every jump lands inside the function (so the instructions can be placed anywhere)."""
    slots = slot_offsets(insns)
    starts, end = set(slots), slots[-1] + insns[-1].slots() if insns else 0
    if not insns or not any(i.code == EXIT for i in insns):
        raise SoftFloatError(f"{name} has no exit")
    for pos, ins in zip(slots, insns, strict=True):
        cls = ins.code & CLASS_MASK
        if ins.code in (CALL, CALLX):
            raise SoftFloatError(f"{name} calls something; library functions must be leaves")
        if cls in (Class.JMP, Class.JMP32) and ins.code != EXIT:
            rel = ins.imm if ins.code == GOTOL else ins.off  # gotol keeps its offset in imm
            target = pos + 1 + rel
            if target not in starts or target >= end:
                raise SoftFloatError(f"{name}: jump at slot {pos} leaves the function")


@functools.cache
def library(mcpu: str = MCPU) -> SoftFloatLibrary:
    """The built and extracted library (built on first call, then from the cache)."""
    path = build(mcpu=mcpu)
    return SoftFloatLibrary(path, extract(path.read_bytes()))


def add_to_btf(btf: BTF, func: SoftFloatFunc) -> int:
    """Add ``func``'s prototype (u64 params -> u64) and a global FUNC to ``btf``; returns the FUNC's type id,
    which the caller puts in the func_info record at the function's first instruction."""
    u64 = btf.int_id(8)
    proto = btf.add_func_proto(u64, [(p, u64) for p in func.params])
    return btf.add_func(func.name, proto, Linkage.GLOBAL)
