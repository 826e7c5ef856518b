"""Text fixtures for the optimizer's passes, in the manner of Cranelift's filetests.

A file under ``tests/opt/filetests/<pass>/`` holds a header, then programs, each followed by the output it
must become, as comments::

    ; what the file is about
    passes peephole                 ; the passes to run, in order: name or name(option=value, ...)
    type syscall                    ; the program type (default xdp)

    program and_then_jne_zero_becomes_jset      ; a case; ``program NAME type=xdp`` overrides the type
        r1 = *(u32 *)(r1 + 0x0)
        r1 &= 0x4
        if r1 != 0x0 goto t
        r0 = 0x0
        exit
    t:
        r0 = 0x1
        exit
    ; rewrites: 1
    ;     r1 = *(u32 *)(r1 + 0x0)
    ;     if r1 & 0x4 goto +0x2 <t>
    ;     ...

The program is BPF assembly as ``capsule.bpf.text`` reads it. The expectation starts at ``; rewrites: ...``
(how many rewrites each pass made, then the program after them as ``format_program`` writes it) or at
``; unchanged`` (no rewrite, the same instructions) and runs to the first line that is not a comment; other
comments are the reader's. ``--bless`` (or ``CAPSULE_BLESS=1``) writes what the passes now produce in place of
each expectation that differs, after an intended change.
"""

from __future__ import annotations

import fcntl
import re
from dataclasses import dataclass, field
from pathlib import Path

from capsule.bpf.spec import ProgramSpec
from capsule.bpf.text import format_program, parse
from capsule.bpf.uapi import ProgType
from capsule.opt.passes import PASSES, Pass
from capsule.opt.rewrite import Code

ROOT = Path(__file__).parent / "filetests"
_EXPECT = re.compile(r"^; (?:rewrites: .*|unchanged)$")
_PROGRAM = re.compile(r"^program\s+([\w.-]+)(?:\s+type=(\w+))?\s*(?:;.*)?$")
_PASS = re.compile(r"(\w+)(?:\(([^)]*)\))?")


class FiletestError(ValueError):
    """A fixture file that does not follow the format."""


@dataclass
class Case:
    name: str
    ptype: int
    first: int  # the line number of the ``program`` line
    body: list[str]  # its lines, up to its last instruction
    expect: list[str] | None = None  # the expectation's lines, None when there is none yet
    expect_at: int = 0  # the expectation's first line number


@dataclass
class Filetest:
    path: Path
    passes: list[tuple[str, dict[str, object]]]
    cases: list[Case] = field(default_factory=list)


def _value(text: str) -> object:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    return int(low, 0)


def _passes(spec: str, where: str) -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = []
    for m in _PASS.finditer(spec):
        name, opts = m[1], m[2]
        if name not in PASSES:
            raise FiletestError(f"{where}: unknown pass {name!r} (known: {', '.join(PASSES)})")
        kw = {}
        for item in filter(None, (o.strip() for o in (opts or "").split(","))):
            key, _, value = item.partition("=")
            kw[key.strip()] = _value(value)
        out.append((name, kw))
    return out


def _ptype(name: str, where: str) -> int:
    try:
        return ProgType[name.upper()]
    except KeyError:
        raise FiletestError(f"{where}: unknown program type {name!r}") from None


def read(path: Path) -> Filetest:
    lines = path.read_text().splitlines()
    passes: list[tuple[str, dict[str, object]]] | None = None
    ptype = int(ProgType.XDP)
    cases: list[Case] = []
    k = 0
    while k < len(lines):
        line, where = lines[k], f"{path}:{k + 1}"
        code = line.split(";", 1)[0].strip()  # what is left without the comment
        m = _PROGRAM.match(line)
        if m:
            cases.append(Case(m[1], _ptype(m[2], where) if m[2] else ptype, k + 1, []))
            pending: list[str] = []  # blank and comment lines: the body's if an instruction follows
        elif cases and _EXPECT.match(line):
            end = k
            while end < len(lines) and lines[end].startswith(";"):
                end += 1
            if cases[-1].expect is not None:
                raise FiletestError(f"{where}: program {cases[-1].name!r} has two expectations")
            cases[-1].expect, cases[-1].expect_at = lines[k:end], k + 1
            k = end
            continue
        elif cases and code:
            if cases[-1].expect is not None:
                raise FiletestError(f"{where}: text after {cases[-1].name!r}'s expectation; start a program first")
            cases[-1].body += [*pending, line]
            pending = []
        elif cases:
            pending.append(line)
        elif code.startswith("passes "):
            passes = _passes(code[len("passes "):], where)
        elif code.startswith("type "):
            ptype = _ptype(code[len("type "):].strip(), where)
        elif code:
            raise FiletestError(f"{where}: expected 'passes', 'type' or 'program', not {line.strip()!r}")
        k += 1
    if not passes:
        raise FiletestError(f"{path}: no 'passes' line")
    if len({c.name for c in cases}) != len(cases):
        raise FiletestError(f"{path}: two programs with one name")
    return Filetest(path, passes, cases)


def _make(name: str, kw: dict[str, object]) -> Pass:
    try:
        return PASSES[name](**kw)  # type: ignore[arg-type]
    except TypeError as e:
        raise FiletestError(f"pass {name}: {e}") from None


def run(ft: Filetest, case: Case) -> tuple[ProgramSpec, ProgramSpec, list[int]]:
    """The case's program, what the passes make of it, and each pass's rewrite count."""
    text = "\n" * (case.first) + "\n".join(case.body)  # parse errors then name the file's own line numbers
    ps = ProgramSpec("t", "xdp", case.ptype, parse(text).insns)
    code, counts = Code.from_program(ps), []
    for name, kw in ft.passes:
        code, n = _make(name, kw).run(code, ps.type)
        counts.append(n)
    return ps, code.to_program(ps), counts


def expectation(ft: Filetest, before: ProgramSpec, after: ProgramSpec, counts: list[int]) -> list[str]:
    """The expectation lines for a result, as the file holds them."""
    same = [(i.encode(), i.ref) for i in before.insns] == [(i.encode(), i.ref) for i in after.insns]
    if not any(counts) and same:
        return ["; unchanged"]
    if len(counts) == 1:
        head = f"; rewrites: {counts[0]}"
    else:
        head = "; rewrites: " + ", ".join(f"{name} {n}" for (name, _), n in zip(ft.passes, counts, strict=True))
    return [head, *(f";{' ' if line else ''}{line}" for line in format_program(after.insns))]


def bless(path: Path, name: str, lines: list[str]) -> None:
    """Write ``lines`` as program ``name``'s expectation, re-reading the file under a lock (parallel workers)."""
    with path.open("r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        text = f.read().splitlines()
        case = next(c for c in read(path).cases if c.name == name)
        if case.expect is None:
            at = end = case.first + len(case.body)  # 0-based: right after the program's last line
        else:
            at, end = case.expect_at - 1, case.expect_at - 1 + len(case.expect)
        text[at:end] = lines
        f.seek(0)
        f.write("\n".join(text) + "\n")
        f.truncate()
