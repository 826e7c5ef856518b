"""Text disassembly of BPF instructions in LLVM's syntax, exactly as ``llvm-objdump-19 -d`` prints it.

Matching LLVM character for character lets tests compare our decoder with clang's view of the same bytes,
and lets people read our output next to ``llvm-objdump`` without translating. LLVM's quirks are kept on
purpose:

- immediates and offsets are hex with a sign (``r1 += -0x1``, ``(r10 - 0x8)``, ``goto +0x3``);
- ``ld_imm64`` prints the whole 64-bit value as a signed number (``r1 = -0x1 ll``), but a pseudo ``ld_imm64``
  (map fd, map value, BTF id, function) prints as ``ld_pseudo\\tr1, <src>, <low 32 bits of imm, unsigned>``;
- every call prints only its immediate (``call 0x1`` for a helper, ``call -0x1`` for an unrelocated pseudo or
  kfunc call); ``ld_ind`` prints only its register (``skb[r1]``), not its immediate;
- an encoding LLVM cannot decode prints as ``<unknown>``.

Two dialects exist because LLVM's decoder depends on the ``alu32`` subtarget feature: by default (what plain
``llvm-objdump -d`` uses) 32-bit loads and stores name 64-bit registers (``r1 = *(u32 *)(r1 + 0x4)``); with
``alu32=True`` (``--mattr=+alu32`` or ``--mcpu=v3``/``v4``) they name ``w`` registers, and 32-bit atomics
exist. In the default dialect plain LLVM misreads 32-bit atomics (it prints ``atomic_fetch_add`` as ``lock ...
+=`` and the rest as ``<unknown>``); we print the correct alu32 spelling for those instead, except for the one
LLVM gets right (``lock *(u32 *)(r1 + 0x0) += r2``).

Jump targets may be annotated like objdump's ``<LBB0_2>`` / ``<prog+0x318>``: pass ``symbols`` (slot index ->
name, the section's symbols) and each jump gets the name of the nearest symbol at or before its target.

``disassemble_object`` prints a whole object read from ELF the way ``llvm-objdump-19 -d --no-show-raw-insn``
does (sections, function labels, the instructions as written, before linking), and adds what objdump only
prints on a separate ``-r`` line: after every relocated instruction, the target its relocation names
(``r1 = 0x0 ll <counters>``, ``call -0x1 <parse_sub>``). A relocation against a section symbol (clang's form
for static functions and variables) is named by the symbol at the place it points to (``call 0x13 <five>``,
``r2 = 0x38 ll <loop_body>``, ``r1 = 0x8 ll <.rodata+0x8>`` when no symbol covers it).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping

from capsule.ints import signed

from .insn import SLOT, Insn, slot_offsets
from .opcodes import (
    ADDR_SPACE_CAST,
    LD_IMM64,
    MODE_MASK,
    OP_MASK,
    SIZE_BYTES,
    SIZE_MASK,
    Alu,
    Atomic,
    Class,
    Jmp,
    Mode,
    Size,
    Src,
)
from .spec import CodeSection, ObjectSpec, ProgramSpec, Reloc

__all__ = ["format_insn", "disassemble", "disassemble_object", "UNKNOWN"]

UNKNOWN = "<unknown>"

_ALU_OPS = {
    Alu.ADD: "+=",
    Alu.SUB: "-=",
    Alu.MUL: "*=",
    Alu.DIV: "/=",
    Alu.OR: "|=",
    Alu.AND: "&=",
    Alu.LSH: "<<=",
    Alu.RSH: ">>=",
    Alu.MOD: "%=",
    Alu.XOR: "^=",
    Alu.MOV: "=",
    Alu.ARSH: "s>>=",
}
_JMP_OPS = {
    Jmp.JEQ: "==",
    Jmp.JGT: ">",
    Jmp.JGE: ">=",
    Jmp.JSET: "&",
    Jmp.JNE: "!=",
    Jmp.JSGT: "s>",
    Jmp.JSGE: "s>=",
    Jmp.JLT: "<",
    Jmp.JLE: "<=",
    Jmp.JSLT: "s<",
    Jmp.JSLE: "s<=",
}
_ATOMIC_OPS = {
    Atomic.ADD: ("+=", "add"),
    Atomic.OR: ("|=", "or"),
    Atomic.AND: ("&=", "and"),
    Atomic.XOR: ("^=", "xor"),
}
_SIZE_NAME = {Size.B: "8", Size.H: "16", Size.W: "32", Size.DW: "64"}


def _hex(v: int) -> str:
    return f"-{-v:#x}" if v < 0 else f"{v:#x}"


def _mem(reg: int, off: int) -> str:
    return f"r{reg} - {-off:#x}" if off < 0 else f"r{reg} + {off:#x}"


def _rel(off: int) -> str:
    return f"-{-off:#x}" if off < 0 else f"+{off:#x}"


def format_insn(
    insn: Insn, pc: int = 0, symbols: Mapping[int, str] | None = None, *, alu32: bool = False
) -> str:
    """One instruction as LLVM prints it. ``pc`` is its slot index, used only to name jump targets."""
    cls = insn.cls
    if cls in (Class.ALU, Class.ALU64):
        text = _alu(insn)
    elif cls in (Class.JMP, Class.JMP32):
        text = _jmp(insn)
        if text != UNKNOWN and symbols and insn.is_jump:
            text += " " + _annotate(pc + 1 + insn.jump_offset(), symbols)
    elif cls == Class.LD:
        text = _ld(insn)
    elif cls == Class.LDX:
        text = _ldx(insn, alu32)
    else:
        text = _store(insn, alu32)
    return text


def disassemble(
    insns: list[Insn], symbols: Mapping[int, str] | None = None, *, alu32: bool = False
) -> list[str]:
    """One line per instruction (an ``ld_imm64`` is one line), without addresses or bytes."""
    return [
        format_insn(i, pc, symbols, alu32=alu32) for i, pc in zip(insns, slot_offsets(insns), strict=True)
    ]


def disassemble_object(spec: ObjectSpec, filename: str, *, alu32: bool = False) -> list[str]:
    """The lines ``llvm-objdump-19 -d --no-show-raw-insn FILENAME`` prints for the object ``spec`` was read
    from, every relocated instruction followed by `` <target>``. A spec that was not read from ELF (built in
    memory) has no code as written: its linked programs are listed instead, one per program."""
    if spec.unlinked is None:
        return _linked_listing(spec, alu32)
    code = spec.unlinked
    out = ["", f"{filename}:\tfile format elf64-bpf"]
    for sec in code.sections:
        if not sec.insns:
            continue  # objdump skips empty sections
        labels = _labels(sec, code.symbols.get(sec.name, ()))
        out += ["", f"Disassembly of section {sec.name}:"]
        for ins, pc in zip(sec.insns, slot_offsets(sec.insns), strict=True):
            if pc in labels:
                out += ["", f"{pc * SLOT:016x} <{labels[pc]}>:"]
            text = format_insn(ins, pc, labels, alu32=alu32)
            rel = sec.relocs.get(pc)
            if rel is not None:
                text += f" <{_reloc_target(ins, rel, code.symbols)}>"
            out.append(f"{pc:8}:\t{text}")
    return out


def _labels(sec: CodeSection, symbols: Iterable[tuple[int, str]]) -> dict[int, str]:
    """Slot -> the label objdump prints there: of the symbols at one address, the last by name; the section's
    name at its start when no symbol is there."""
    end = sum(i.slots() for i in sec.insns)
    labels: dict[int, str] = {}
    for off, name in sorted(symbols):
        if off % SLOT == 0 and off // SLOT < end:
            labels[off // SLOT] = name
    if 0 not in labels:
        labels[0] = sec.name
    return labels


def _reloc_target(ins: Insn, rel: Reloc, symbols: Mapping[str, Iterable[tuple[int, str]]]) -> str:
    """What a relocated instruction refers to: the relocation's symbol plus the offset the instruction adds
    (a call's ``imm + 1`` slots, an ``ld_imm64``'s low 32 bits); for a section symbol, the symbol covering
    that place in the section."""
    delta = (ins.imm + 1) * SLOT if ins.is_call else signed(ins.imm, 32)
    if not rel.section_symbol:
        return rel.symbol if delta == 0 else f"{rel.symbol}{_rel(delta)}"
    off = rel.value + delta
    best: tuple[int, str] | None = None
    for at, name in sorted(symbols.get(rel.section or "", ())):
        if at <= off:
            best = (at, name)  # the last at or before the place, as objdump picks labels
    if best is None:
        return rel.symbol if off == 0 else f"{rel.symbol}{_rel(off)}"
    return best[1] if off == best[0] else f"{best[1]}{_rel(off - best[0])}"


def _linked_listing(spec: ObjectSpec, alu32: bool) -> list[str]:
    out: list[str] = []
    for name, ps in spec.programs.items():
        labels = _function_labels(spec, ps)
        out += ["", f"Disassembly of program {name} (section {ps.section}, linked):"]
        for ins, pc in zip(ps.insns, slot_offsets(ps.insns), strict=True):
            if pc in labels:
                out += ["", f"{pc * SLOT:016x} <{labels[pc]}>:"]
            out.append(f"{pc:8}:\t{format_insn(ins, pc, labels, alu32=alu32)}")
    return out


def _function_labels(spec: ObjectSpec, ps: ProgramSpec) -> dict[int, str]:
    """Slot -> function name, from the program's func_info (entry and linked subprograms)."""
    names: dict[int, str] = {0: ps.name}
    if spec.btf is not None:
        for fi in ps.func_infos:
            try:
                names[fi.insn_off] = spec.btf.name_of(fi.type_id)
            except (KeyError, IndexError):
                pass
    return names


def _annotate(target: int, symbols: Mapping[int, str]) -> str:
    """objdump's ``<sym>`` / ``<sym+0xbytes>`` for a target slot: the nearest symbol at or before it."""
    keys = sorted(symbols)
    i = bisect_right(keys, target) - 1
    if i < 0:
        return f"<{target * 8:#x}>"  # not reached for code that starts at a symbol
    base = keys[i]
    delta = (target - base) * 8
    return f"<{symbols[base]}>" if delta == 0 else f"<{symbols[base]}+{delta:#x}>"


def _alu(insn: Insn) -> str:
    w32 = insn.cls == Class.ALU
    r = "w" if w32 else "r"
    op = insn.code & OP_MASK
    dst = f"{r}{insn.dst}"
    x = insn.code & Src.X
    if op == Alu.NEG:
        return f"{dst} = -{dst}"
    if op == Alu.END:
        bits = insn.imm
        if bits not in (16, 32, 64):
            return UNKNOWN
        if w32:
            name = "be" if x else "le"
        elif not x:
            name = "bswap"
        else:
            return UNKNOWN
        return f"r{insn.dst} = {name}{bits} r{insn.dst}"
    if op not in _ALU_OPS:
        return UNKNOWN
    if op == Alu.MOV and x and insn.off:
        if not w32 and insn.off == ADDR_SPACE_CAST:
            return (
                f"r{insn.dst} = addr_space_cast(r{insn.src}, {_hex(insn.imm >> 16 & 0xFFFF)}, "
                f"{_hex(insn.imm & 0xFFFF)})"
            )
        if insn.off in ((8, 16) if w32 else (8, 16, 32)):
            return f"{dst} = (s{insn.off}){r}{insn.src}"
        return UNKNOWN
    sym = _ALU_OPS[Alu(op)]
    if op in (Alu.DIV, Alu.MOD) and insn.off == 1:
        sym = "s" + sym
    src = f"{r}{insn.src}" if x else _hex(insn.imm)
    return f"{dst} {sym} {src}"


def _jmp(insn: Insn) -> str:
    op = insn.code & OP_MASK
    x = insn.code & Src.X
    if insn.cls == Class.JMP:
        if op == Jmp.JA:
            return f"goto {_rel(insn.off)}"
        if op == Jmp.CALL:
            return f"callx r{insn.dst}" if x else f"call {_hex(insn.imm)}"
        if op == Jmp.EXIT:
            return "exit"
        if op == Jmp.JCOND:
            return f"may_goto {_rel(insn.off)}"
        r = "r"
    else:
        if op == Jmp.JA:
            return f"gotol {_rel(insn.imm)}"
        r = "w"
    if op not in _JMP_OPS:
        return UNKNOWN
    src = f"{r}{insn.src}" if x else _hex(insn.imm)
    return f"if {r}{insn.dst} {_JMP_OPS[Jmp(op)]} {src} goto {_rel(insn.off)}"


def _ld(insn: Insn) -> str:
    if insn.code == LD_IMM64:
        if insn.src:
            return f"ld_pseudo\tr{insn.dst}, {_hex(insn.src)}, {_hex(insn.imm & 0xFFFFFFFF)}"
        return f"r{insn.dst} = {_hex(signed(insn.imm, 64))} ll"
    mode, size = insn.code & MODE_MASK, insn.code & SIZE_MASK
    if size == Size.DW or mode not in (Mode.ABS, Mode.IND):
        return UNKNOWN
    where = _hex(insn.imm) if mode == Mode.ABS else f"r{insn.src}"
    return f"r0 = *(u{_SIZE_NAME[Size(size)]} *)skb[{where}]"


def _ldx(insn: Insn, alu32: bool) -> str:
    mode, size = insn.code & MODE_MASK, Size(insn.code & SIZE_MASK)
    if mode == Mode.MEM:
        r = "w" if alu32 and size != Size.DW else "r"
        return f"{r}{insn.dst} = *(u{_SIZE_NAME[size]} *)({_mem(insn.src, insn.off)})"
    if mode == Mode.MEMSX and size != Size.DW:
        return f"r{insn.dst} = *(s{_SIZE_NAME[size]} *)({_mem(insn.src, insn.off)})"
    return UNKNOWN


def _store(insn: Insn, alu32: bool) -> str:
    mode, size = insn.code & MODE_MASK, Size(insn.code & SIZE_MASK)
    where = f"*(u{_SIZE_NAME[size]} *)({_mem(insn.dst, insn.off)})"
    if insn.cls == Class.ST:
        return f"{where} = {_hex(insn.imm)}" if mode == Mode.MEM else UNKNOWN
    if mode == Mode.MEM:
        r = "w" if alu32 and size != Size.DW else "r"
        return f"{where} = {r}{insn.src}"
    if mode != Mode.ATOMIC or SIZE_BYTES[size] < 4:
        return UNKNOWN
    return _atomic(insn, size, alu32)


def _atomic(insn: Insn, size: Size, alu32: bool) -> str:
    wide = size == Size.DW
    # 32-bit atomics name w registers, except the plain add LLVM also decodes without alu32
    r = "r" if wide or (not alu32 and insn.imm == Atomic.ADD) else "w"
    bits = _SIZE_NAME[size]
    addr = _mem(insn.dst, insn.off)
    src = f"{r}{insn.src}"
    imm = insn.imm
    if imm in _ATOMIC_OPS:
        return f"lock *(u{bits} *)({addr}) {_ATOMIC_OPS[Atomic(imm)][0]} {src}"
    if imm & ~Atomic.FETCH in _ATOMIC_OPS and imm & Atomic.FETCH:
        name = _ATOMIC_OPS[Atomic(imm & ~Atomic.FETCH)][1]
        return f"{src} = atomic_fetch_{name}((u{bits} *)({addr}), {src})"
    suffix = "_64" if wide else "32_32"
    if imm == Atomic.XCHG:
        return f"{src} = xchg{suffix}({addr}, {src})"
    if imm == Atomic.CMPXCHG:
        return f"{r}0 = cmpxchg{suffix}({addr}, {r}0, {src})"
    return UNKNOWN
