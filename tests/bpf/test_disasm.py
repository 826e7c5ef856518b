"""capsule.bpf.disasm against LLVM, over the whole C corpus and over a systematic set of encodings.

For every corpus object (tests/corpus/*.c compiled with clang-19 for cpu v2, v3 and v4, from the version the
file's ``// capsule-corpus: vN`` marker names) and every executable section:

(a) ``encode(decode(bytes)) == bytes`` exactly;
(b) each instruction's text equals what ``llvm-objdump-19 -d`` prints after the address and hex bytes,
including objdump's ``<LBB0_2>`` / ``<prog+0x318>`` jump annotations (we pass the section's symbols from the
ELF symbol table, so nothing is stripped). Relocation-bearing immediates need no normalisation: neither tool
applies relocations, both print the raw field (``r1 = 0x0 ll``, ``call -0x1``).

The one normalisation: plain ``llvm-objdump -d`` decodes 32-bit atomics without the alu32 feature and gets
them wrong (``atomic_fetch_add`` printed as ``lock ... +=``, cmpxchg/xchg/fetch-or as ``<unknown>``). Those
instructions (BPF_STX | BPF_W | BPF_ATOMIC with imm != BPF_ADD) are compared against ``llvm-objdump-19 -d
--mattr=+alu32`` instead, which decodes them correctly. Separately, the ``alu32=True`` dialect is compared
line for line against ``--mattr=+alu32`` output with no exception at all.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from capsule.bpf.disasm import UNKNOWN, disassemble, format_insn
from capsule.bpf.insn import Insn, decode, encode, slot_offsets
from capsule.bpf.opcodes import Atomic, Class, Mode, Size

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from clang import CORPUS, compile_bpf  # noqa: E402

OBJDUMP = shutil.which("llvm-objdump-19")
LLVM_MC = shutil.which("llvm-mc-19")
CPUS = ("v2", "v3", "v4")
needs_llvm = pytest.mark.skipif(OBJDUMP is None or LLVM_MC is None, reason="llvm-19 tools come from setup.sh")


def corpus_builds() -> list[tuple[str, str]]:
    """(file stem, cpu) for every corpus file and every cpu from its minimum (marker) up."""
    out = []
    for path in sorted(CORPUS.glob("*.c")):
        m = re.search(r"^// capsule-corpus: (v[234])\b", path.read_text(), re.M)
        first = CPUS.index(m.group(1)) if m else 0
        out += [(path.stem, cpu) for cpu in CPUS[first:]]
    return out


BUILDS = corpus_builds()


def exec_sections(obj: Path) -> Iterator[tuple[str, bytes, dict[int, str]]]:
    """(name, bytes, slot -> symbol name) of every non-empty executable section."""
    with obj.open("rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        for idx, sec in enumerate(elf.iter_sections()):
            if not sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR or sec["sh_size"] == 0:
                continue
            syms = {}
            for s in symtab.iter_symbols():
                if s["st_shndx"] == idx and s["st_info"]["type"] in ("STT_FUNC", "STT_NOTYPE") and s.name:
                    syms.setdefault(s["st_value"] // 8, s.name)
            yield sec.name, sec.data(), syms


_LINE = re.compile(r"^\s*(\d+):\t(?:[0-9a-f]{2} ){7,15}[0-9a-f]{2}\t(.*)$")


def objdump(obj: Path, *extra: str) -> dict[str, dict[int, str]]:
    """section -> slot -> instruction text, parsed from llvm-objdump-19 -d."""
    res = subprocess.run([OBJDUMP, "-d", *extra, str(obj)], capture_output=True, text=True, check=True)
    out: dict[str, dict[int, str]] = {}
    cur: dict[int, str] = {}
    for line in res.stdout.splitlines():
        if line.startswith("Disassembly of section "):
            cur = out.setdefault(line[len("Disassembly of section ") :].rstrip(":"), {})
        elif m := _LINE.match(line):
            cur[int(m.group(1))] = m.group(2)
    return out


def misdecoded_by_plain_llvm(ins: Insn) -> bool:
    """32-bit atomics other than plain add, which LLVM only decodes with the alu32 feature."""
    return ins.code == Class.STX | Size.W | Mode.ATOMIC and ins.imm != Atomic.ADD


def compiled(stem: str, cpu: str) -> Path:
    return compile_bpf(CORPUS / f"{stem}.c", cpu)


@pytest.mark.parametrize("stem,cpu", BUILDS, ids=[f"{s}-{c}" for s, c in BUILDS])
def test_corpus_roundtrip_and_text(stem: str, cpu: str) -> None:
    obj = compiled(stem, cpu)
    sections = list(exec_sections(obj))
    assert sections, f"{obj} has no code"
    if OBJDUMP is None:
        pytest.skip("llvm-objdump-19 missing")
    plain, alu32 = objdump(obj), objdump(obj, "--mattr=+alu32")
    mismatches: list[str] = []
    total = 0
    for name, data, syms in sections:
        insns = decode(data)
        assert encode(insns) == data, f"{name}: encode(decode(b)) != b"
        ours, ours32 = disassemble(insns, syms), disassemble(insns, syms, alu32=True)
        for ins, pc, text, text32 in zip(insns, slot_offsets(insns), ours, ours32, strict=True):
            total += 1
            want = (alu32 if misdecoded_by_plain_llvm(ins) else plain)[name].get(pc)
            if text != want:
                mismatches.append(f"{name}@{pc} {ins!r}: ours {text!r}, llvm {want!r}")
            if text32 != alu32[name].get(pc):
                mismatches.append(
                    f"{name}@{pc} (alu32) {ins!r}: ours {text32!r}, llvm {alu32[name].get(pc)!r}"
                )
        assert set(plain[name]) == set(slot_offsets(insns)), f"{name}: instruction boundaries differ"
    assert total > 0
    assert not mismatches, f"{len(mismatches)} of {total} instructions differ:\n" + "\n".join(mismatches[:30])


def _corpus_insns() -> list[Insn]:
    return [
        i for stem, cpu in BUILDS for _, data, _ in exec_sections(compiled(stem, cpu)) for i in decode(data)
    ]


def test_corpus_covers_the_instruction_set() -> None:
    """The corpus is the disassembler's test bed: it must contain every kind of instruction clang can emit."""
    texts = {format_insn(i, alu32=True) for i in _corpus_insns()}
    joined = "\n".join(texts)
    wanted = {
        "alu64 reg": r"^r\d \+= r\d$",
        "alu32 imm": r"^w\d \+= ",
        "sdiv": r" s/= ",
        "smod": r" s%= ",
        "movsx": r"= \(s8\)r",
        "movsx32": r"= \(s16\)w",
        "bswap": r"bswap(16|32|64)",
        "be": r"= be(16|32|64) ",
        "le": r"= le(16|32|64) ",
        "ld_imm64": r" ll$",
        "ldx8": r"\*\(u8 \*\)\(",
        "ldx16": r"= \*\(u16 \*\)",
        "ldx64": r"= \*\(u64 \*\)",
        "ldxs8": r"\*\(s8 \*\)",
        "ldxs16": r"\*\(s16 \*\)",
        "ldxs32": r"\*\(s32 \*\)",
        "st imm": r"^\*\(u\d+ \*\)\(.*\) = (-?0x)",
        "stx": r"^\*\(u64 \*\)\(.*\) = r\d$",
        "lock add64": r"lock \*\(u64",
        "lock add32": r"lock \*\(u32 \*\)\(.*\) \+= w",
        "lock or/and/xor": r"lock .* (\||&|\^)=",
        "fetch_add": "atomic_fetch_add",
        "fetch_or": "atomic_fetch_or",
        "fetch_and": "atomic_fetch_and",
        "fetch_xor": "atomic_fetch_xor",
        "xchg64": "xchg_64",
        "xchg32": "xchg32_32",
        "cmpxchg64": "cmpxchg_64",
        "cmpxchg32": "cmpxchg32_32",
        "jmp imm": r"^if r\d [^ ]+ -?0x",
        "jmp reg": r"^if r\d [^ ]+ r\d",
        "jmp32": r"^if w\d",
        "signed jmp": r" s[<>]=? ",
        "goto": r"^goto ",
        "gotol": r"^gotol ",
        "may_goto": r"^may_goto ",
        "call": r"^call 0x",
        "pseudo/kfunc call": r"^call -0x1$",
        "exit": r"^exit$",
        "addr_space_cast": r"addr_space_cast\(",
        "ld_abs": r"skb\[0x",
        "ld_ind": r"skb\[r\d\]",
        "neg": r"= -[rw]\d$",
    }
    missing = [k for k, pat in wanted.items() if not re.search(pat, joined, re.M)]
    assert not missing, f"no corpus instruction for: {missing}"
    assert UNKNOWN not in texts


def test_corpus_has_kfunc_and_bpf_calls() -> None:
    """clang leaves both as src=1 calls with relocations; the loader later marks kfuncs src=2."""
    calls = [i for i in _corpus_insns() if i.is_call]
    assert any(i.src == 1 for i in calls) and any(i.src == 0 for i in calls)


# -- a systematic set of kernel-valid encodings, against LLVM's disassembler ---------------------------------
def systematic() -> list[Insn]:
    """Every opcode the kernel accepts, with operands chosen to hit signs, widths and register spellings."""
    out: list[Insn] = []
    operands = [(1, 2, 3, 5), (3, 0, -8, -1), (0, 9, 0x7FFF, 0x7FFFFFFF), (10, 1, -0x8000, -0x80000000)]
    for cls in (Class.ALU, Class.ALU64):
        for op in range(0x00, 0xD0, 0x10):
            if op == 0x80:  # NEG: K only
                out.append(Insn(cls | op, 4))
                continue
            for d, s, _, imm in operands:
                out.append(Insn(cls | op, d, 0, 0, imm))
                out.append(Insn(cls | op | 0x08, d, s))
        for op in (0x30, 0x90):  # sdiv, smod
            out += [Insn(cls | op, 2, 0, 1, -7), Insn(cls | op | 0x08, 2, 3, 1)]
        for bits in (8, 16) + ((32,) if cls == Class.ALU64 else ()):
            out.append(Insn(cls | 0xB8, 5, 6, bits))
        for bits in (16, 32, 64):
            out += [Insn(cls | 0xD0, 7, 0, 0, bits)] + (
                [Insn(cls | 0xD8, 7, 0, 0, bits)] if cls == Class.ALU else []
            )
    out += [Insn(0xBF, 1, 2, 1, 1), Insn(0xBF, 3, 3, 1, 0x10000)]  # addr_space_cast both ways
    for v in (0, 1, -1 & (2**64 - 1), 0x8000000000000000, 0x123456789ABCDEF0, 0xFFFFFFFF):
        out.append(Insn(0x18, 2, 0, 0, v))
    for src in range(1, 7):
        out.append(Insn(0x18, 1, src, 0, 0x5 | (0x10 << 32)))
        out.append(Insn(0x18, 1, src, 0, 0xFFFFFFF0))
    for size in (Size.B, Size.H, Size.W):
        out += [Insn(Class.LD | size | Mode.ABS, 0, 0, 0, 0x1C), Insn(Class.LD | size | Mode.IND, 0, 4, 0, 0)]
        out.append(Insn(Class.LDX | size | Mode.MEMSX, 1, 2, -3))
    for size in (Size.B, Size.H, Size.W, Size.DW):
        for d, s, off, imm in operands:
            out += [
                Insn(Class.LDX | size | Mode.MEM, d, s, off),
                Insn(Class.ST | size | Mode.MEM, d, 0, off, imm),
                Insn(Class.STX | size | Mode.MEM, d, s, off),
            ]
    for size in (Size.W, Size.DW):
        for imm in (0x00, 0x40, 0x50, 0xA0, 0x01, 0x41, 0x51, 0xA1, 0xE1, 0xF1):
            out.append(Insn(Class.STX | size | Mode.ATOMIC, 1, 2, -16, imm))
    for cls in (Class.JMP, Class.JMP32):
        for op in (0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xA0, 0xB0, 0xC0, 0xD0):
            for d, s, off, imm in operands:
                out += [Insn(cls | op, d, 0, off, imm), Insn(cls | op | 0x08, d, s, off)]
    out += [
        Insn(0x05, 0, 0, 0x7FFF),
        Insn(0x05, 0, 0, -1),
        Insn(0x06, 0, 0, 0, -100000),
        Insn(0x06, 0, 0, 0, 0),
        Insn(0xE5, 0, 0, 12),
        Insn(0xE5, 0, 0, -3),
        Insn(0x85, 0, 0, 0, 1),
        Insn(0x85, 0, 1, 0, -1),
        Insn(0x85, 0, 2, 0, 123456),
        Insn(0x95),
    ]
    return out


def llvm_mc_disassemble(insns: list[Insn], alu32: bool) -> list[str | None]:
    """LLVM's text for each instruction (None where LLVM rejects the encoding)."""
    lines = [" ".join(f"0x{b:02x}" for b in i.encode()) for i in insns]
    res = subprocess.run(
        [LLVM_MC, "--disassemble", "-triple=bpfel", "--print-imm-hex"] + (["-mattr=+alu32"] if alu32 else []),
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    bad = {
        int(n) for n in re.findall(r"<stdin>:(\d+):\d+: warning: invalid instruction encoding", res.stderr)
    }
    texts = iter(t.strip() for t in res.stdout.splitlines() if t.strip() and t.strip() != ".text")
    out = [None if n in bad else next(texts) for n in range(1, len(insns) + 1)]
    assert next(texts, None) is None
    return out


@needs_llvm
@pytest.mark.parametrize("alu32", [False, True], ids=["plain", "alu32"])
def test_systematic_encodings_match_llvm_mc(alu32: bool) -> None:
    insns = systematic()
    ref = llvm_mc_disassemble(insns, alu32)
    rejected = [i for i, r in zip(insns, ref, strict=True) if r is None]
    assert all(misdecoded_by_plain_llvm(i) for i in rejected) and (alu32 or rejected), rejected
    mism = []
    for ins, want in zip(insns, ref, strict=True):
        if not alu32 and misdecoded_by_plain_llvm(ins):
            continue  # covered by the alu32 run
        assert want is not None
        want = want if want.startswith("ld_pseudo") else want.replace("\t", " ")
        got = format_insn(ins, alu32=alu32)
        if got != want:
            mism.append(f"{ins!r}: ours {got!r}, llvm {want!r}")
    assert not mism, "\n".join(mism)
    assert len(insns) > 450


def test_unknown_encodings() -> None:
    for ins in (
        Insn(0xBF, 1, 2, 2),
        Insn(0xBC, 1, 2, 32),
        Insn(0xDF, 1),
        Insn(0x38),
        Insn(0x87 | 0xE0),
        Insn(Class.STX | Size.B | Mode.ATOMIC),
        Insn(Class.STX | Size.DW | Mode.ATOMIC, imm=0x02),
        Insn(Class.LDX | Size.DW | Mode.MEMSX),
        Insn(Class.ST | Size.W | Mode.ATOMIC),
        Insn(0xF6),
    ):
        assert format_insn(ins) == UNKNOWN, ins


def test_annotations() -> None:
    insns = [Insn(0x05, off=1), Insn(0xB7), Insn(0x95), Insn(0x15, 1, 0, -3, 0)]
    syms = {0: "prog", 2: "LBB0_2"}
    assert disassemble(insns, syms) == [
        "goto +0x1 <LBB0_2>",
        "r0 = 0x0",
        "exit",
        "if r1 == 0x0 goto -0x3 <prog+0x8>",
    ]
    assert disassemble(insns)[0] == "goto +0x1"
