"""``disassemble_object`` (``capsule disasm``) against ``llvm-objdump-19 -d -r --no-show-raw-insn``.

For every corpus object (tests/corpus/*.c built by clang-19 at cpu v2, v3 and v4) the listing must be
objdump's, line for line: the file header, every ``Disassembly of section`` line, every function label and
every instruction, character for character. Two normalisations, both stated here:

- objdump prints a relocation on its own ``R_BPF_...`` line after the instruction (``-r``); capsule puts the
  relocation's target after the instruction instead (``r1 = 0x0 ll <counters>``). Each such line must equal
  objdump's instruction followed by `` <target>``, and every instruction objdump shows a relocation for (and no
  other) carries one. The target is the relocation's symbol, or for a section symbol a symbol of that section.
- plain ``llvm-objdump -d`` misdecodes 32-bit atomics other than ``lock ... += wN`` (it lacks the alu32
  feature); for those instructions capsule's text is compared with ``--mattr=+alu32`` instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.asm import R0, exit_, mov
from capsule.bpf.disasm import disassemble_object
from capsule.bpf.elf import read_object
from capsule.bpf.insn import Insn, slot_offsets
from capsule.bpf.opcodes import Atomic, Class, Mode, Size
from capsule.bpf.spec import ObjectSpec, ProgramSpec
from capsule.bpf.uapi import ProgType
from tests.bpf.test_disasm import BUILDS, compiled

OBJDUMP = shutil.which("llvm-objdump-19")
needs_objdump = pytest.mark.skipif(OBJDUMP is None, reason="llvm-objdump-19 comes from setup.sh")

_RELOC = re.compile(r"^\t\t[0-9a-f]{16}:  (R_BPF_\w+)\t(.*)$")
_INSN = re.compile(r"^ *(\d+):\t(.*)$")


def objdump_lines(obj: Path, *extra: str) -> tuple[list[str], dict[int, str]]:
    """objdump's lines without its relocation lines, and line index -> the relocation's symbol."""
    text = subprocess.run([OBJDUMP, "-d", "-r", "--no-show-raw-insn", *extra, str(obj)],
                          capture_output=True, text=True, check=True).stdout
    lines: list[str] = []
    relocs: dict[int, str] = {}
    for line in text.rstrip("\n").split("\n"):
        m = _RELOC.match(line)
        if m:
            assert lines and _INSN.match(lines[-1]), f"relocation line not after an instruction: {line!r}"
            relocs[len(lines) - 1] = m.group(2)
        else:
            lines.append(line)
    return lines, relocs


def misdecoded_by_plain_llvm(ins: Insn) -> bool:
    return ins.code == Class.STX | Size.W | Mode.ATOMIC and ins.imm != Atomic.ADD


def section_symbols(obj: Path) -> dict[str, set[str]]:
    """Section name -> names of the symbols defined in it, read independently of capsule's reader."""
    out: dict[str, set[str]] = {}
    with obj.open("rb") as f:
        elf = ELFFile(f)
        names = [s.name for s in elf.iter_sections()]
        for s in elf.get_section_by_name(".symtab").iter_symbols():
            if isinstance(s["st_shndx"], int) and s["st_shndx"] > 0 and s.name:
                out.setdefault(names[s["st_shndx"]], set()).add(s.name)
    return out


def check_listing(obj: Path) -> int:
    """Compare capsule's listing of ``obj`` with objdump's; returns how many relocated lines were checked."""
    spec = read_object(obj)
    ours = disassemble_object(spec, str(obj))
    theirs, relocs = objdump_lines(obj)
    alu32, _ = objdump_lines(obj, "--mattr=+alu32")
    assert len(ours) == len(theirs) == len(alu32), "listings differ in length"
    insns = {(sec.name, pc): ins for sec in spec.unlinked.sections
             for ins, pc in zip(sec.insns, slot_offsets(sec.insns), strict=True)}
    owners = section_symbols(obj)
    section = ""
    mismatches = []
    for k, (mine, want) in enumerate(zip(ours, theirs, strict=True)):
        if want.startswith("Disassembly of section "):
            section = want[len("Disassembly of section "):-1]
        m = _INSN.match(want)
        if m and misdecoded_by_plain_llvm(insns[(section, int(m.group(1)))]):
            want = alu32[k]
        if k in relocs:
            sym = relocs[k]
            head, sep, target = mine.rpartition(" <")
            if not sep or not target.endswith(">"):
                mismatches.append(f"line {k}: relocated operand not named: {mine!r} (relocation against {sym})")
                continue
            base = re.split(r"[+-]0x", target[:-1])[0]
            # a named symbol is named as is; a section symbol (objdump prints the section) by a symbol in it
            if base != sym and base not in owners.get(sym, set()):
                mismatches.append(f"line {k}: {target} is neither {sym} nor a symbol of section {sym}")
            mine = head
        if mine != want:
            mismatches.append(f"line {k}: ours {mine!r}, objdump {want!r}")
    assert not mismatches, f"{obj.name}: {len(mismatches)} lines differ:\n" + "\n".join(mismatches[:30])
    return len(relocs)


@needs_objdump
@pytest.mark.parametrize("stem,cpu", BUILDS, ids=[f"{s}-{c}" for s, c in BUILDS])
def test_listing_is_objdumps_with_relocations_named(stem: str, cpu: str) -> None:
    check_listing(compiled(stem, cpu))


@needs_objdump
def test_the_corpus_has_relocations_of_every_kind() -> None:
    """The comparison above means something only if the corpus relocates calls, maps, data and functions."""
    kinds = set()
    for stem, cpu in BUILDS:
        for sec in read_object(compiled(stem, cpu)).unlinked.sections:
            for pc, rel in sec.relocs.items():
                ins = next(i for i, p in zip(sec.insns, slot_offsets(sec.insns), strict=True) if p == pc)
                kinds.add(("call" if ins.is_call else "ld_imm64", rel.section_symbol, rel.section is None))
    assert ("call", False, True) in kinds  # kfunc
    assert ("call", False, False) in kinds  # global subprogram
    assert ("call", True, False) in kinds  # static subprogram (against .text)
    assert ("ld_imm64", False, False) in kinds  # map or global variable
    assert ("ld_imm64", True, False) in kinds  # static variable or function address


@needs_objdump
def test_section_symbol_relocations_name_what_they_point_at() -> None:
    obj = compiled("subprogs", "v4")
    text = "\n".join(disassemble_object(read_object(obj), str(obj)))
    assert "\tcall 0x13 <five>\n" in text  # .text + (0x13 + 1) * 8
    assert "\tr2 = 0x38 ll <loop_body>\n" in text  # .text + 0x38, bpf_loop's callback
    assert "\tcall -0x1 <global_clamp>\n" in text
    assert "\tr8 = 0x0 ll <results>\n" in text


def test_a_spec_built_in_memory_lists_its_linked_programs() -> None:
    spec = ObjectSpec(programs={"p": ProgramSpec("p", "xdp", ProgType.XDP, [mov(R0, 2), exit_()])})
    assert disassemble_object(spec, "-") == [
        "", "Disassembly of program p (section xdp, linked):", "", "0000000000000000 <p>:",
        "       0:\tr0 = 0x2", "       1:\texit",
    ]


# labels objdump's way, on a hand-written object: a section with no symbol at its start (objdump labels it
# with the section's name), three symbols at one address (objdump shows the last by name), NOTYPE labels, a
# symbol's size that does not end its code, and an empty code section (not shown)
LABELS_ASM = """
	.text
	.globl	f
	.type	f,@function
f:
	r0 = 0
	exit
g_notype:
	r0 = 1
	exit
	.section	xdp,"ax",@progbits
	if r0 > 2 goto +0
	r0 = 2
	exit
	.globl alias2
	.type alias2,@function
alias2:
	.globl alias1
	.type alias1,@function
alias1:
aaa:
	r0 = 3
	if r0 > 2 goto lab
	exit
lab:
	exit
	.section	empty,"ax",@progbits
	.section	tc,"ax",@progbits
	.globl	t
	.type	t,@function
t:
	r0 = 0
	exit
	.size t, 16
	r0 = 9
	exit
"""


@needs_objdump
@pytest.mark.skipif(shutil.which("llvm-mc-19") is None, reason="llvm-mc-19 comes from setup.sh")
def test_labels_follow_objdump(tmp_path: Path) -> None:
    src, obj = tmp_path / "labels.s", tmp_path / "labels.o"
    src.write_text(LABELS_ASM)
    subprocess.run(["llvm-mc-19", "-triple", "bpfel", "-filetype=obj", str(src), "-o", str(obj)], check=True)
    check_listing(obj)
    text = disassemble_object(read_object(obj), str(obj))
    assert "0000000000000000 <xdp>:" in text and "0000000000000018 <alias2>:" in text
    assert not any("empty" in line for line in text)
