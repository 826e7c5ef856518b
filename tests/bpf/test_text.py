"""capsule.bpf.text: BPF assembly text back to instructions.

The parser is the disassembler's inverse, so it is tested by round trips: every program of every test object
(clang-built, read by capsule's ELF reader) and of capsule-compiled modules, and the systematic encoding set of
test_disasm, formatted and parsed back, are the same instructions (bytes and references); every code section
as ``llvm-objdump-19 -d`` prints it parses to the section's bytes. Then each piece of the syntax on its own,
and the errors.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R6,
    call,
    call_helper,
    call_kfunc,
    exit_,
    ja,
    jmp,
    ld_func,
    ld_ind,
    ld_map_fd,
    ld_map_value,
    mov,
)
from capsule.bpf.disasm import disassemble, disassemble_object
from capsule.bpf.elf import ObjectError, read_object
from capsule.bpf.insn import Insn, decode, slot_offsets
from capsule.bpf.opcodes import CallKind, Jmp
from capsule.bpf.text import Note, TextError, format_program, parse, parse_insn
from capsule.compiler import Options, compile_module
from capsule.wasm import load
from tests.bpf.test_disasm import BUILDS, compiled, systematic
from tests.clang import CACHE
from tests.wasm.wasm_build import wat

OBJDUMP = shutil.which("llvm-objdump-19")

CALLS_AND_MEMORY = r"""
(module
  (memory 1)
  (func $sq (param i32) (result i32) (i32.mul (local.get 0) (local.get 0)))
  (func (export "run") (param i32) (result i32) (local i32)
    (loop $l
      (i32.store (i32.mul (local.get 1) (i32.const 4)) (call $sq (local.get 1)))
      (br_if $l (i32.lt_u (local.tee 1 (i32.add (local.get 1) (i32.const 1))) (local.get 0))))
    (i32.load (i32.const 8))))
"""


def _same(want: list[Insn], got: list[Insn], where: str) -> None:
    """Bytes and references equal, and every name a position had is still there (the text may add labels)."""
    assert len(got) == len(want), f"{where}: {len(got)} instructions back, not {len(want)}"
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert (g.encode(), g.ref) == (w.encode(), w.ref), f"{where} #{i}: {disassemble([w])} read back as {g!r}"
        assert w.sym is None or g.sym == w.sym, f"{where} #{i}: label {w.sym!r} read back as {g.sym!r}"


def _round_trip(insns: list[Insn], where: str) -> None:
    for alu32 in (False, True):
        _same(insns, parse("\n".join(format_program(insns, alu32=alu32))).insns, f"{where} (alu32={alu32})")


# -- round trips -------------------------------------------------------------------------------------------
def test_every_program_of_every_test_object_reads_back() -> None:
    for stem, cpu in BUILDS:
        compiled(stem, cpu)  # the corpus at least, on a fresh cache
    programs = unreadable = 0
    for obj in sorted(CACHE.glob("*.o")):
        try:
            spec = read_object(obj)
        except ObjectError:
            unreadable += 1  # objects that test the reader's refusals
            continue
        for name, ps in spec.programs.items():
            _round_trip(ps.insns, f"{obj.name}:{name}")
            programs += 1
    # every build gives at least one program; how many more depends on what else the cache holds
    assert programs >= len(BUILDS) and unreadable < programs, (programs, unreadable)


def test_compiled_modules_read_back() -> None:
    modules = [wat(CALLS_AND_MEMORY), *(p.read_bytes() for p in sorted((CACHE / "wasm").glob("*.wasm")))]
    calls = 0
    for k, data in enumerate(modules):
        try:
            spec = compile_module(load(data), Options())
        except Exception:  # noqa: BLE001 - the test cache also holds modules the compiler refuses on purpose
            assert k, "the fixture module must compile"
            continue
        for name, ps in spec.programs.items():
            _round_trip(ps.insns, f"module {k}:{name}")
            calls += sum(i.is_call and i.src == CallKind.BPF for i in ps.insns)
    assert calls, "no BPF-to-BPF call was read back"


def test_systematic_encodings_read_back() -> None:
    _round_trip(systematic(), "systematic")


@pytest.mark.skipif(OBJDUMP is None, reason="llvm-objdump-19 comes from setup.sh")
def test_llvm_objdump_listings_parse_to_the_section_bytes() -> None:
    """llvm-objdump's own text, pasted whole (headers, addresses, raw bytes): the bytes come back, but for the
    kind of a call, which the llvm text does not say (``call 0x13`` is a helper or a BPF-to-BPF call)."""
    sections = 0
    for stem, cpu in BUILDS:
        obj = compiled(stem, cpu)
        out = subprocess.run([OBJDUMP, "-d", "--mattr=+alu32", str(obj)], capture_output=True, text=True,
                             check=True).stdout
        chunks = re.split(r"^Disassembly of section (.*):$", out, flags=re.M)
        with obj.open("rb") as f:
            elf = ELFFile(f)
            for name, listing in zip(chunks[1::2], chunks[2::2], strict=True):
                want = decode(elf.get_section_by_name(name).data())
                got = parse(listing).insns
                for w, g in zip(want, got, strict=True):
                    if w.is_call:
                        assert g.is_call and (g.imm, g.dst) == (w.imm, w.dst), (obj.name, name, w, g)
                    else:
                        assert g.encode() == w.encode(), (obj.name, name, disassemble([w]), g)
                sections += 1
    assert sections >= len(BUILDS)


def test_object_disassembly_reads_back_with_its_relocation_names() -> None:
    """``disassemble_object``'s listing (the object as written, each relocation's target after the instruction)
    parses to the sections' bytes, and every relocated instruction's annotation comes back as its note; a call's
    kind is the one field the text settles differently (a kfunc is a src 0x1 call in clang's object, and a
    named call that no label of the listing answers reads as a kfunc, src 0x2)."""
    objects = 0
    for stem, cpu in BUILDS:
        obj = compiled(stem, cpu)
        spec = read_object(obj)
        assert spec.unlinked is not None
        listing = "\n".join(disassemble_object(spec, obj.name))
        chunks = dict(zip(*[iter(re.split(r"^Disassembly of section (.*):$", listing, flags=re.M)[1:])] * 2,
                          strict=True))
        for sec in spec.unlinked.sections:
            if not sec.insns:
                continue
            lst = parse(chunks[sec.name])
            for ins, back, note, pc in zip(sec.insns, lst.insns, lst.notes, slot_offsets(sec.insns), strict=True):
                if ins.is_call:
                    assert (back.code, back.dst, back.imm) == (ins.code, ins.dst, ins.imm), (obj.name, pc)
                else:
                    assert back.encode() == ins.encode(), (obj.name, sec.name, pc, disassemble([ins]), back)
                if pc in sec.relocs:
                    assert note is not None and note.name, (obj.name, sec.name, pc)
                elif not ins.is_jump:  # a jump's note is objdump's name of its target
                    assert note is None, (obj.name, sec.name, pc, note)
        objects += 1
    assert objects == len(BUILDS)


# -- the syntax --------------------------------------------------------------------------------------------
def test_labels_resolve_like_the_builder() -> None:
    text = """
        r0 = 0x0          ; comments run to the end of the line
        if r1 == 0x0 goto out
        call f
        goto +0x1
    out:
        exit
    f:
        r0 = 0x2
        exit
    """
    lst = parse(text)
    assert disassemble(lst.insns) == ["r0 = 0x0", "if r1 == 0x0 goto +0x2", "call 0x2", "goto +0x1", "exit",
                                      "r0 = 0x2", "exit"]
    assert lst.labels == {"out": 4, "f": 5} and lst.insns[4].sym == "out" and lst.insns[2].src == CallKind.BPF
    assert lst.lines == [2, 3, 4, 5, 7, 9, 10]


def test_annotations_carry_what_the_llvm_text_leaves_out() -> None:
    lst = parse("""
        ld_pseudo r6, 0x1, 0x0 <counters>
        ld_pseudo\tr1, 0x2, 0x0 <.bss+0x10>
        ld_pseudo r2, 0x4, 0x2 <cb>
        call 0x1
        call 0x0 <bpf_obj_new_impl>
        call bpf_obj_drop_impl
        r0 = *(u32 *)skb[r1] <+0x4>
        goto +0x0 <somewhere+0x8>
        exit
    cb:
        exit
    """)
    assert lst.insns[:7] == [ld_map_fd(R6, "counters"), ld_map_value(R1, ".bss", 0x10),
                             Insn(ld_func(R2, "cb").code, 2, 4, 0, 2), call_helper(1),
                             call_kfunc("bpf_obj_new_impl"), call_kfunc("bpf_obj_drop_impl"), ld_ind(4, R1, 4)]
    assert lst.notes[1] == Note(".bss", 0x10) and lst.notes[3] is None and str(lst.notes[7]) == "<somewhere+0x8>"


def test_object_listings_keep_the_relocation_symbol() -> None:
    """helper A's object disassembly names each relocation after the instruction, as written by clang."""
    lst = parse("""
    0000000000000000 <prog>:
           0:\tr1 = 0x0 ll <counters>
           2:\tcall -0x1 <parse_sub>
           3:\tcall 0x0 <five>
           4:\texit
    0000000000000028 <five>:
           5:\tr0 = 0x5
           6:\texit
    """)
    assert lst.insns[0].ref == "counters" and lst.insns[0].src == 0 and lst.insns[0].imm == 0
    assert (lst.insns[1].src, lst.insns[1].ref, lst.insns[1].imm) == (CallKind.KFUNC, "parse_sub", -1)
    assert (lst.insns[2].src, lst.insns[2].imm) == (CallKind.BPF, 0)  # <five> is a label of the listing
    assert lst.labels == {"prog": 0, "five": 4}


def test_every_dialect_spelling() -> None:
    pairs = {
        "w1 = *(u32 *)(r2 - 0x8)": "r1 = *(u32 *)(r2 - 0x8)",
        "*(u16 *)(r10 - 0x2) = w3": "*(u16 *)(r10 - 0x2) = r3",
        "lock *(u32 *)(r1 + 0x0) += w2": "lock *(u32 *)(r1 + 0x0) += r2",
        "r1 = 5": "r1 = 0x5",
        "w1 += 0xffffffff": "w1 += -0x1",  # the 32-bit field, spelled unsigned
    }
    for text, same in pairs.items():
        assert parse_insn(text) == parse_insn(same), text
    assert disassemble([parse_insn("  r1   +=   r2 ")]) == ["r1 += r2"]


def test_program_round_trip_keeps_labels_and_names_calls() -> None:
    insns = parse("""
    main:
        r1 = 0x1
        call sub
        if r0 s> 0x3 goto main
        exit
    sub:
        r0 = r1
        exit
    """).insns
    text = format_program(insns)
    assert text == ["main:", "    r1 = 0x1", "    call 0x2 <sub>", "    if r0 s> 0x3 goto -0x3 <main>", "    exit",
                    "sub:", "    r0 = r1", "    exit"]
    assert parse("\n".join(text)).insns == insns
    unnamed = format_program([mov(R1, 1), call(1), exit_(), mov(R0, R1), exit_()])
    assert unnamed == ["    r1 = 0x1", "    call 0x1 <L3>", "    exit", "L3:", "    r0 = r1", "    exit"]


# -- errors ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ("r0 = 0x0\nr1 == r2\nexit", r"line 2: not a BPF instruction: 'r1 == r2'"),
    ("<unknown>", r"line 1: <unknown> \(an encoding the disassembler cannot print\) cannot be assembled"),
    ("goto out\nexit", r"line 1: no label 'out'"),
    ("a:\nexit\na:\nexit", r"line 3: label 'a' defined twice"),
    ("exit\nend:", r"label 'end' is after the last instruction"),
    ("r1 += w2", r"r1 and w2 are registers of different widths"),
    ("w1 = *(u64 *)(r2 + 0x0)", r"an 8-byte access names r1, not w1"),
    ("r11 = 0x0", r"not a BPF instruction"),
    ("r1 = 0x100000000", r"does not fit in 32 bits"),
    ("*(u32 *)(r1 + 0x8000) = 0x0", r"offset 32768 does not fit in 16 bits"),
    ("r0 = cmpxchg_64(r1 + 0x0, r2, r3)", r"cmpxchg compares with and returns in r0"),
    ("ld_pseudo r1, 0x2, lbl\nlbl:\nexit", r"only the address of a function .* is a label"),
    ("r1 = -r2", r"negation is in place"),
])
def test_errors_name_the_line_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(TextError, match=message):
        parse(text)


def test_a_jump_out_of_range_is_an_error_not_a_wider_jump() -> None:
    far = "\n".join(["goto end", *(["r0 = 0x0"] * 0x8000), "end:", "exit"])
    with pytest.raises(TextError, match="beyond the 16-bit offset"):
        parse(far)
    assert parse(far.replace("goto end", "gotol end", 1)).insns[0].imm == 0x8000
    assert jmp(Jmp.JEQ, R1, 0, 1) == parse_insn("if r1 == 0x0 goto +0x1") and ja(-1) == parse_insn("goto -0x1")


def test_empty_text_is_an_empty_program() -> None:
    assert parse("").insns == [] and parse("; nothing\n\n").insns == []
