"""BPF assembly text to instructions: the inverse of ``capsule.bpf.disasm``, for text fixtures and pasted listings.

The syntax is the one ``disasm`` (and ``llvm-objdump-19 -d``) prints, one instruction a line, plus what a
program written by hand needs:

- labels: ``name:`` on a line of its own binds to the next instruction; a jump, a BPF-to-BPF call or an
  ``ld_pseudo`` of a function (src 0x4) may name one instead of giving a number (``goto out``, ``call f``),
  and the ``Builder`` turns the name into the offset, as it does for ``capsule.bpf.asm``;
- comments from ``;`` to the end of the line, blank lines, and the decorations of an objdump listing (the
  file and section headers, ``0000000000000010 <name>:`` labels, slot addresses and raw bytes), so a listing
  pastes in as it is;
- a trailing annotation ``<name>``, ``<name+0x8>`` or ``<+0x8>`` carries what the llvm text leaves out, the
  way objdump names a relocation's target (``r1 = 0x0 ll <counters>``, ``call -0x1 <parse_sub>``):

  - on ``ld_pseudo``: the map, variable or ksym the instruction refers to (``ref``), and for a map value
    (src 0x2 or 0x6) the offset into it, which the llvm text (the low word only) drops;
  - on ``call N``: that the call is not a helper call: a BPF-to-BPF call when the name is a label of this
    text, else a kfunc call named ``name``;
  - on ``rD = N ll``: the relocation's symbol, kept as ``ref``; on ``skb[rS]``: the offset the llvm text
    drops; on a jump: nothing (objdump's name of the target; the number is what counts).

``format_program`` writes that form: ``parse(format_program(insns))`` gives the instructions back. A line
that is not an instruction raises ``TextError`` naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from capsule.ints import fits_unsigned, signed, unsigned

from . import asm
from .asm import AsmError, Builder, Reg
from .disasm import _ALU_OPS, _ATOMIC_OPS, _JMP_OPS, UNKNOWN, format_insn
from .insn import Insn, slot_offsets
from .opcodes import CALLX, LD_IMM64, MODE_MASK, CallKind, Class, Mode, Pseudo

__all__ = ["TextError", "Note", "Listing", "parse", "parse_insn", "format_program"]


class TextError(ValueError):
    """A line that is not BPF assembly, or labels that do not resolve."""


@dataclass(frozen=True)
class Note:
    """A trailing ``<name+offset>`` annotation."""

    name: str
    offset: int = 0

    def __str__(self) -> str:
        if not self.offset:
            return f"<{self.name}>"
        return f"<{self.name}{'+' if self.offset > 0 else '-'}{abs(self.offset):#x}>"


@dataclass
class Listing:
    """A parsed text: its instructions (labels resolved), each one's annotation, and the labels by name."""

    insns: list[Insn]
    notes: list[Note | None]
    labels: dict[str, int] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)  # the text's line number of each instruction


# -- lexical pieces ------------------------------------------------------------------------------------------
_NUM = r"[+-]?(?:0x[0-9a-fA-F]+|\d+)"
_NAME = r"[A-Za-z_.$][\w.$@]*"
_R = r"r(?:10|[0-9])"
_REG = r"[rw](?:10|[0-9])"
_OPND = rf"(?:{_REG}|{_NUM})"
_TARGET = rf"(?:[+-](?:0x[0-9a-fA-F]+|\d+)|{_NAME})"
_ADDR = rf"(?P<base>{_R}) (?P<sign>[+-]) (?P<mag>{_NUM})"  # r1 + 0x4, inside the parentheses

_NOTE = re.compile(r"\s*<([^<>]*)>\s*$")
_NOTE_BODY = re.compile(r"^(.*?)(?:([+-])(0x[0-9a-fA-F]+|\d+))?$")
_LABEL = re.compile(rf"^({_NAME}):$")
_OBJDUMP_LABEL = re.compile(r"^[0-9a-fA-F]+ <([^<>]+)>:$")
_ADDRESS = re.compile(r"^\s*[0-9a-fA-F]+:\s+(?:(?:[0-9a-fA-F]{2} ){7}[0-9a-fA-F]{2}(?: [0-9a-fA-F]{2}){0,8}(?:\s+|$))?")
_SKIP = re.compile(r"^(?:.*:\s+file format \S+|Disassembly of section .*:)$")

_ALU_BY_SYM = {sym: op for op, sym in _ALU_OPS.items()}
_JMP_BY_SYM = {sym: op for op, sym in _JMP_OPS.items()}
_ATOMIC_BY_SYM = {sym: op for op, (sym, _name) in _ATOMIC_OPS.items()}
_ATOMIC_BY_NAME = {name: op for op, (_sym, name) in _ATOMIC_OPS.items()}


def _alternatives(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))  # longest first: `<<=` before `=`


_ALU_SYMS = _alternatives([*_ALU_BY_SYM, "s/=", "s%="])
_JMP_SYMS = _alternatives(list(_JMP_BY_SYM))
_ATOMIC_SYMS = _alternatives(list(_ATOMIC_BY_SYM))
_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}


def _num(s: str) -> int:
    return int(s, 0)


def _is_reg(s: str) -> bool:
    return s[0] in "rw" and s[1:].isdigit()


def _reg(s: str) -> tuple[Reg, bool]:
    """A register and whether it was spelled as its 32-bit half (``w``)."""
    return Reg(int(s[1:])), s[0] == "w"


def _same_width(a: str, b: str) -> None:
    if _is_reg(b) and _reg(a)[1] != _reg(b)[1]:
        raise AsmError(f"{a} and {b} are registers of different widths")


def _operand(s: str) -> Reg | int:
    return _reg(s)[0] if _is_reg(s) else _num(s)


def _addr(m: re.Match[str]) -> tuple[Reg, int]:
    off = _num(m["mag"])
    return _reg(m["base"])[0], -off if m["sign"] == "-" else off


def _target(s: str) -> int | str:
    return s if re.fullmatch(_NAME, s) else _num(s)


def _sized(reg: str, nbytes: int) -> Reg:
    """The register of a load or store; ``w`` names one only for accesses under 8 bytes (the alu32 dialect)."""
    r, w32 = _reg(reg)
    if w32 and nbytes == 8:
        raise AsmError(f"an 8-byte access names r{int(r)}, not {reg}")
    return r


# -- one instruction -----------------------------------------------------------------------------------------
def _alu(m: re.Match[str]) -> Insn:
    _same_width(m["dst"], m["src"])
    dst, w32 = _reg(m["dst"])
    sym, src = m["op"], _operand(m["src"])
    if sym in ("s/=", "s%="):
        return (asm.sdiv if sym == "s/=" else asm.smod)(dst, src, w32=w32)
    return asm.alu(_ALU_BY_SYM[sym], dst, src, w32=w32)


def _neg(m: re.Match[str]) -> Insn:
    if m["dst"] != m["src"]:
        raise AsmError(f"negation is in place, not {m['dst']} = -{m['src']}")
    dst, w32 = _reg(m["dst"])
    return asm.neg(dst, w32=w32)


def _movsx(m: re.Match[str]) -> Insn:
    _same_width(m["dst"], m["src"])
    dst, w32 = _reg(m["dst"])
    return asm.movsx(dst, _reg(m["src"])[0], int(m["bits"]), w32=w32)


def _end(m: re.Match[str]) -> Insn:
    if m["dst"] != m["src"]:
        raise AsmError(f"{m['name']}{m['bits']} converts a register in place, not {m['dst']} = ... {m['src']}")
    convert = {"le": asm.to_le, "be": asm.to_be, "bswap": asm.bswap}[m["name"]]
    return convert(_reg(m["dst"])[0], int(m["bits"]))


def _load(m: re.Match[str]) -> Insn:
    nbytes = _BYTES[m["bits"]]
    base, off = _addr(m)
    return (asm.ldxs if m["sx"] == "s" else asm.ldx)(nbytes, _sized(m["dst"], nbytes), base, off)


def _store(m: re.Match[str]) -> Insn:
    nbytes = _BYTES[m["bits"]]
    base, off = _addr(m)
    if _is_reg(m["value"]):
        return asm.stx(nbytes, base, off, _sized(m["value"], nbytes))
    return asm.st(nbytes, base, off, _num(m["value"]))


def _lock(m: re.Match[str]) -> Insn:
    base, off = _addr(m)
    return asm.atomic(_ATOMIC_BY_SYM[m["op"]], _BYTES[m["bits"]], base, off, _reg(m["src"])[0])


def _fetch(m: re.Match[str]) -> Insn:
    if m["out"][1:] != m["src"][1:]:
        raise AsmError(f"atomic_fetch_{m['name']} returns the old value in its source, not {m['out']}")
    base, off = _addr(m)
    return asm.atomic(_ATOMIC_BY_NAME[m["name"]], _BYTES[m["bits"]], base, off, _reg(m["src"])[0], fetch=True)


def _exchange(m: re.Match[str]) -> Insn:
    nbytes = 8 if m["suffix"] == "_64" else 4
    base, off = _addr(m)
    if m["op"] == "xchg":
        if m["out"][1:] != m["src"][1:]:
            raise AsmError(f"xchg returns the old value in its source, not {m['out']}")
        return asm.xchg(nbytes, base, off, _reg(m["src"])[0])
    if m["out"][1:] != "0" or m["old"][1:] != "0":
        raise AsmError("cmpxchg compares with and returns in r0")
    return asm.cmpxchg(nbytes, base, off, _reg(m["src"])[0])


def _cond_jump(m: re.Match[str]) -> Insn:
    _same_width(m["dst"], m["src"])
    dst, w32 = _reg(m["dst"])
    return asm.jmp(_JMP_BY_SYM[m["op"]], dst, _operand(m["src"]), _target(m["target"]), w32=w32)


def _call(m: re.Match[str]) -> Insn:
    what = m["what"]
    if re.fullmatch(_NAME, what):
        return asm.call(what)  # a label, or else a kfunc's name: settled once every label is known
    return asm.call_helper(_num(what))


def _ld_pseudo(m: re.Match[str]) -> Insn:
    dst, src, imm = _reg(m["dst"])[0], _num(m["src"]), m["imm"]
    if not 0 <= src <= 15:
        raise AsmError(f"ld_pseudo source {src:#x} does not fit the 4-bit register field")
    if re.fullmatch(_NAME, imm):
        if src != Pseudo.FUNC:
            raise AsmError(f"only the address of a function (source {int(Pseudo.FUNC):#x}) is a label, not {imm!r}")
        return asm.ld_func(dst, imm)
    low = _num(imm)
    if not fits_unsigned(low, 32):
        raise AsmError(f"ld_pseudo's immediate is its unsigned low word, not {low:#x}")
    return Insn(LD_IMM64, int(dst), src, 0, low)


_Build = Callable[[re.Match[str]], Insn]  # a matched line -> its instruction


def _rule(pattern: str, build: _Build) -> tuple[re.Pattern[str], _Build]:
    return re.compile(f"^{pattern}$"), build


_RULES = [
    _rule("exit", lambda m: asm.exit_()),
    _rule(rf"goto ({_TARGET})", lambda m: asm.ja(_target(m[1]))),
    _rule(rf"gotol ({_TARGET})", lambda m: asm.gotol(_target(m[1]))),
    _rule(rf"may_goto ({_TARGET})", lambda m: asm.may_goto(_target(m[1]))),
    _rule(rf"call (?P<what>{_NUM}|{_NAME})", _call),
    _rule(rf"callx ({_R})", lambda m: Insn(CALLX, int(_reg(m[1])[0]))),
    _rule(rf"if (?P<dst>{_REG}) (?P<op>{_JMP_SYMS}) (?P<src>{_OPND}) goto (?P<target>{_TARGET})", _cond_jump),
    _rule(rf"ld_pseudo (?P<dst>{_R}), ?(?P<src>{_NUM}), ?(?P<imm>{_NUM}|{_NAME})", _ld_pseudo),
    _rule(rf"({_R}) = ({_NUM}) ll", lambda m: asm.ld_imm64(_reg(m[1])[0], _num(m[2]))),
    _rule(rf"r0 = \*\(u(8|16|32) \*\)skb\[({_NUM})\]", lambda m: asm.ld_abs(_BYTES[m[1]], _num(m[2]))),
    _rule(rf"r0 = \*\(u(8|16|32) \*\)skb\[({_R})\]", lambda m: asm.ld_ind(_BYTES[m[1]], _reg(m[2])[0], 0)),
    _rule(rf"(?P<dst>{_REG}) = \*\((?P<sx>[us])(?P<bits>8|16|32|64) \*\)\({_ADDR}\)", _load),
    _rule(rf"\*\(u(?P<bits>8|16|32|64) \*\)\({_ADDR}\) = (?P<value>{_OPND})", _store),
    _rule(rf"lock \*\(u(?P<bits>32|64) \*\)\({_ADDR}\) (?P<op>{_ATOMIC_SYMS}) (?P<src>{_REG})", _lock),
    _rule(rf"(?P<out>{_REG}) = atomic_fetch_(?P<name>add|or|and|xor)\(\(u(?P<bits>32|64) \*\)\({_ADDR}\), "
          rf"(?P<src>{_REG})\)", _fetch),
    _rule(rf"(?P<out>{_REG}) = (?P<op>xchg)(?P<suffix>_64|32_32)\({_ADDR}, (?P<src>{_REG})\)", _exchange),
    _rule(rf"(?P<out>{_REG}) = (?P<op>cmpxchg)(?P<suffix>_64|32_32)\({_ADDR}, (?P<old>{_REG}), (?P<src>{_REG})\)",
          _exchange),
    _rule(rf"({_R}) = addr_space_cast\(({_R}), ({_NUM}), ({_NUM})\)",
          lambda m: asm.addr_space_cast(_reg(m[1])[0], _reg(m[2])[0], _num(m[3]), _num(m[4]))),
    _rule(rf"(?P<dst>{_R}) = (?P<name>le|be|bswap)(?P<bits>16|32|64) (?P<src>{_R})", _end),
    _rule(rf"(?P<dst>{_REG}) = \(s(?P<bits>8|16|32)\)(?P<src>{_REG})", _movsx),
    _rule(rf"(?P<dst>{_REG}) = -(?P<src>{_REG})", _neg),
    _rule(rf"(?P<dst>{_REG}) (?P<op>{_ALU_SYMS}) (?P<src>{_OPND})", _alu),
]


def parse_insn(text: str) -> Insn:
    """One instruction in disasm's syntax (no label, comment or annotation). A label operand stays in ``ref``."""
    line = " ".join(text.split())
    if line == UNKNOWN:
        raise TextError(f"{UNKNOWN} (an encoding the disassembler cannot print) cannot be assembled")
    for pattern, build in _RULES:
        m = pattern.match(line)
        if m:
            try:
                return build(m)
            except AsmError as e:
                raise TextError(f"{line!r}: {e}") from None
    raise TextError(f"not a BPF instruction: {line!r}")


# -- a whole text --------------------------------------------------------------------------------------------
def _note(body: str) -> Note:
    m = _NOTE_BODY.match(body)
    assert m is not None  # the pattern matches every string
    off = _num(m[3]) if m[3] else 0
    return Note(m[1], -off if m[2] == "-" else off)


def _split(line: str) -> tuple[str, Note | None]:
    """The instruction text and its trailing annotation."""
    m = _NOTE.search(line)
    if m is None or line[: m.start()].strip() == "" or line.strip() == UNKNOWN:
        return line.strip(), None
    return line[: m.start()].strip(), _note(m[1])


def _apply(ins: Insn, note: Note | None, labels: dict[str, int]) -> Insn:
    """What an annotation or a name operand says about the instruction (module docstring)."""
    if ins.is_call and ins.src == CallKind.BPF and ins.ref is not None and ins.ref not in labels:
        return Insn(ins.code, src=CallKind.KFUNC, ref=ins.ref)  # `call name`: no such label, a kfunc
    if note is None:
        return ins
    if ins.is_ld_imm64 and ins.src == Pseudo.FUNC and note.name in labels and not note.offset:
        return ins  # the name of the function the offset already points to
    if ins.is_ld_imm64 and ins.src:
        if not fits_unsigned(note.offset, 32):
            raise AsmError(f"offset {note.offset:#x} does not fit the high word")
        return replace(ins, imm=unsigned(ins.imm, 32) | note.offset << 32, ref=note.name or None)
    if ins.is_ld_imm64:
        return replace(ins, ref=note.name or None)  # an object's relocation, as objdump names it
    if ins.is_call and ins.src == CallKind.HELPER and ins.ref is None:
        if note.name in labels:
            return replace(ins, src=CallKind.BPF)
        return replace(ins, src=CallKind.KFUNC, ref=note.name or None)
    if _is_ld_ind(ins) and not ins.imm:  # the offset the llvm text does not print
        return replace(ins, imm=note.offset)
    return ins


def parse(text: str) -> Listing:
    """A whole text: labels, instructions, annotations; label operands resolved to offsets."""
    raw: list[tuple[int, Insn, Note | None]] = []
    labels: dict[str, int] = {}
    for lineno, full in enumerate(text.splitlines(), 1):
        line = full.split(";", 1)[0].rstrip()
        if not line.strip() or _SKIP.match(line.strip()):
            continue
        label = _LABEL.match(line.strip()) or _OBJDUMP_LABEL.match(line.strip())
        if label:
            if label[1] in labels and labels[label[1]] != len(raw):
                raise TextError(f"line {lineno}: label {label[1]!r} defined twice")
            labels[label[1]] = len(raw)
            continue
        line = _ADDRESS.sub("", line, count=1)
        if not line.strip():
            continue  # the second slot of an ld_imm64 in an objdump listing: its bytes only
        body, note = _split(line)
        try:
            raw.append((lineno, parse_insn(body), note))
        except TextError as e:
            raise TextError(f"line {lineno}: {e}") from None
    b = Builder()
    at: dict[int, list[str]] = {}
    for name, idx in labels.items():
        at.setdefault(idx, []).append(name)
    for idx, (lineno, ins, note) in enumerate(raw):
        for name in at.get(idx, ()):
            b.label(name)
        try:
            ins = _apply(ins, note, labels)
        except AsmError as e:
            raise TextError(f"line {lineno}: {e}") from None
        if ins.ref is not None and _is_label_operand(ins) and ins.ref not in labels:
            raise TextError(f"line {lineno}: no label {ins.ref!r}")
        b.emit(ins)
    for name, idx in labels.items():
        if idx >= len(raw):
            raise TextError(f"label {name!r} is after the last instruction")
    try:
        insns = b.assemble(relax=False)
    except AsmError as e:
        raise TextError(str(e)) from None
    return Listing(insns, [n for _, _, n in raw], labels, [ln for ln, _, _ in raw])


def _is_ld_ind(ins: Insn) -> bool:
    return ins.cls == Class.LD and ins.code & MODE_MASK == Mode.IND


def _is_label_operand(ins: Insn) -> bool:
    return ins.is_jump or (ins.is_call and ins.src == CallKind.BPF) or (ins.is_ld_imm64 and ins.src == Pseudo.FUNC)


# -- writing -------------------------------------------------------------------------------------------------
def format_program(insns: list[Insn], *, alu32: bool = False) -> list[str]:
    """The lines of a program in the syntax ``parse`` reads: a label line where an instruction has a ``sym``
    or a call or function address lands (``L<slot>`` when it has none), each instruction as ``disasm`` prints
    it, indented, with the annotation of what the llvm text leaves out, and jumps named by objdump's
    ``<label+0x8>``. A BPF-to-BPF call out of ``insns`` (into a subprogram not among them) has no label to
    name, so it reads back as a helper call: give the whole program."""
    slots = slot_offsets(insns)
    index_of = {s: i for i, s in enumerate(slots)}
    names: dict[int, str] = {i: ins.sym for i, ins in enumerate(insns) if ins.sym}
    taken = set(names.values())
    for i, ins in enumerate(insns):
        if _calls_into(ins):
            j = index_of.get(slots[i] + 1 + signed(ins.imm, 32))
            if j is not None and j not in names:
                name = f"L{slots[j]}"
                while name in taken:
                    name += "_"
                names[j] = name
                taken.add(name)
    symbols = {slots[i]: n for i, n in names.items()}
    out: list[str] = []
    for i, (ins, pc) in enumerate(zip(insns, slots, strict=True)):
        if i in names:
            out.append(f"{names[i]}:")
        named = ins.is_jump and any(at <= pc + 1 + ins.jump_offset() for at in symbols)
        text = format_insn(ins, pc, symbols if named else None, alu32=alu32)  # no objdump `<0x10>` before a label
        note = _note_of(ins, pc, symbols)
        out.append(f"    {text} {note}" if note else f"    {text}")
    return out


def _calls_into(ins: Insn) -> bool:
    """A call or function address whose immediate is an offset to a place in this program."""
    return (ins.is_call and ins.src == CallKind.BPF) or (ins.is_ld_imm64 and ins.src == Pseudo.FUNC)


def _note_of(ins: Insn, pc: int, symbols: dict[int, str]) -> Note | None:
    if _calls_into(ins) and not (ins.is_ld_imm64 and ins.imm >> 32):
        name = symbols.get(pc + 1 + signed(ins.imm, 32))
        return Note(name) if name else None
    if ins.is_call and ins.src == CallKind.KFUNC:
        return Note(ins.ref or "")
    if ins.is_ld_imm64 and ins.src:
        high = unsigned(ins.imm >> 32, 32)
        return Note(ins.ref or "", high) if ins.ref or high else None
    if _is_ld_ind(ins) and ins.imm:
        return Note("", ins.imm)
    return None
