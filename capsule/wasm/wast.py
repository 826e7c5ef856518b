"""Running the WebAssembly spec testsuite (``.wast`` scripts) against capsule's reader and validator.

wabt's ``wast2json`` turns a script into JSON commands plus one binary per module; this driver checks the
commands that are about decoding and validation (``module``, ``assert_invalid``, ``assert_malformed``,
``assert_unlinkable``, ``assert_uninstantiable``) and ignores the ones about execution.

The testsuite is newer than Debian's wabt 1.0.32, whose text parser does not know some of its syntax (typed
references, ``module definition``, tags, ...). Rather than losing a whole file to one such form, conversion
drops the top-level forms wast2json reports errors in (keeping line numbers, so errors map back to forms) and
retries; every dropped form is reported with wast2json's reason, never hidden. Conversions are cached by
content hash under a directory of the caller's choosing; the cache is safe to share between parallel workers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InvalidError, MalformedError, WasmError
from .reader import read_module
from .validate import validate

WAST2JSON = shutil.which("wast2json") or "wast2json"
_CACHE_VERSION = "3"
_ERROR_LINE = re.compile(r":(\d+):\d+: error: (.*)")
#: Commands this driver checks; the others (assert_return, assert_trap, ...) are about execution.
CHECKED = ("module", "assert_invalid", "assert_malformed", "assert_unlinkable", "assert_uninstantiable")
#: MalformedError messages accepted for an ``assert_invalid``: the module is invalid in the text format,
#: but its binary encoding (as wast2json writes it) is already malformed. A text module that uses
#: ``memory.init`` or ``data.drop`` without any data segment gets no data count section, which the binary
#: format requires.
ENCODING_ARTEFACTS = ("data count section required",)


@dataclass
class Form:
    """One top-level s-expression of a .wast script: its span and 1-based first/last lines."""

    start: int
    end: int
    first_line: int
    last_line: int
    head: str  # e.g. "module", "assert_invalid"


@dataclass
class Dropped:
    line: int
    head: str
    reason: str


@dataclass
class Conversion:
    json_path: Path
    dropped: list[Dropped]


@dataclass
class FileReport:
    """Outcome of one .wast file: counts per category, mismatches (``file:line: what``) and dropped forms."""

    name: str
    counts: Counter[str] = field(default_factory=Counter)
    mismatches: list[str] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)


def split_forms(text: str) -> list[Form]:
    """Top-level forms of a .wast script, skipping ``;;`` and nested ``(; ;)`` comments and strings."""
    forms: list[Form] = []
    i, n, depth, line = 0, len(text), 0, 1
    start = start_line = 0
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == ";" and text.startswith(";;", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c == "(" and text.startswith("(;", i):
            nest, i = 1, i + 2
            while i < n and nest:
                if text.startswith("(;", i):
                    nest, i = nest + 1, i + 2
                elif text.startswith(";)", i):
                    nest, i = nest - 1, i + 2
                else:
                    line += text[i] == "\n"
                    i += 1
            continue
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                line += text[i] == "\n" if i < n else 0
                i += 1
        elif c == "(":
            if depth == 0:
                start, start_line = i, line
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                head = re.match(r"\(\s*([\w.$]+)", text[start : start + 64])
                forms.append(Form(start, i + 1, start_line, line, head.group(1) if head else "?"))
        i += 1
    return forms


def _blank(text: str, spans: list[Form]) -> str:
    """The script with the given spans replaced by whitespace of the same line structure."""
    out, pos = [], 0
    for f in sorted(spans, key=lambda f: f.start):
        out.append(text[pos : f.start])
        out.append(re.sub(r"[^\n]", " ", text[f.start : f.end]))
        pos = f.end
    out.append(text[pos:])
    return "".join(out)


def _fields(text: str, form: Form) -> list[Form]:
    """The fields (func, table, elem, ...) of a text ``module`` form (none for binary/quote/definition)."""
    if form.head != "module" or re.match(
        r"\(\s*module(\s+\$\S+)?\s+(binary|quote|definition)\b", text[form.start : form.start + 200]
    ):
        return []
    base = form.start + 1
    return [
        Form(
            base + g.start,
            base + g.end,
            form.first_line + g.first_line - 1,
            form.first_line + g.last_line - 1,
            f"field:{g.head}",
        )
        for g in split_forms(text[base : form.end - 1])
    ]


def _wast2json(text: str, workdir: Path, stem: str) -> subprocess.CompletedProcess[str]:
    src = workdir / f"{stem}.wast"
    src.write_text(text)
    # --no-check: modules are validated by capsule, not by wabt 1.0.32 (which predates some 3.0 relaxations)
    return subprocess.run(
        [WAST2JSON, "--no-check", str(src), "-o", str(workdir / f"{stem}.json")],
        capture_output=True,
        text=True,
        cwd=workdir,
    )


def convert(wast: Path, cache: Path) -> Conversion:
    """Convert one script (cached by content), dropping the forms wast2json cannot handle."""
    text = wast.read_text()
    key = hashlib.sha256((text + _CACHE_VERSION + WAST2JSON).encode()).hexdigest()[:16]
    final = cache / f"{wast.stem}-{key}"
    if not (final / "done.json").exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{wast.stem}-", dir=cache))
        try:
            dropped = _convert_into(text, tmp, wast.stem)
            (tmp / "done.json").write_text(json.dumps([d.__dict__ for d in dropped]))
            try:
                os.rename(tmp, final)
            except OSError:  # another worker finished first: use its copy
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    dropped = [Dropped(**d) for d in json.loads((final / "done.json").read_text())]
    return Conversion(final / f"{wast.stem}.json", dropped)


def _convert_into(text: str, workdir: Path, stem: str) -> list[Dropped]:
    """Run wast2json, dropping what it reports errors in until it succeeds.

    An error inside a text module drops just the module field it is in (a function using syntax wabt does
    not know), so the rest of the module is still checked; an error outside any field drops the whole form.
    """
    forms = split_forms(text)
    fields = [_fields(text, f) for f in forms]
    drop: dict[int, tuple[Form, str]] = {}  # keyed by start offset
    for _ in range(len(forms) + sum(map(len, fields)) + 1):
        res = _wast2json(_blank(text, [f for f, _ in drop.values()]), workdir, stem)
        if res.returncode == 0:
            kept = [
                (f, r)
                for f, r in drop.values()
                if not any(
                    d.start < f.start < d.end for d, _ in drop.values() if not d.head.startswith("field:")
                )
            ]
            return [
                Dropped(f.first_line, f.head, reason) for f, reason in sorted(kept, key=lambda x: x[0].start)
            ]
        new: dict[int, tuple[Form, str]] = {}
        for m in _ERROR_LINE.finditer(res.stderr):
            line, reason = int(m.group(1)), m.group(2)
            for k, f in enumerate(forms):
                if f.first_line <= line <= f.last_line and f.start not in drop:
                    field = next(
                        (g for g in fields[k] if g.first_line <= line <= g.last_line and g.start not in drop),
                        None,
                    )
                    target = field or f
                    new.setdefault(target.start, (target, reason))
        if not new:  # no usable line (wast2json crashed): find the culprits one form at a time
            for f in forms:
                if f.start in drop:
                    continue
                one = _wast2json(text[f.start : f.end], workdir, f"{stem}-one")
                if one.returncode:
                    new[f.start] = (f, (one.stderr.strip().splitlines() or ["wast2json failed"])[-1][:200])
        if not new:
            raise RuntimeError(
                f"wast2json fails on {stem} and no single form is to blame:\n{res.stderr[-2000:]}"
            )
        drop.update(new)
    raise RuntimeError(f"wast2json: could not converge on {stem}")


def run_file(wast: Path, cache: Path) -> FileReport:
    """Convert and check one script; see the module docstring for what each command must do."""
    conv = convert(wast, cache)
    report = FileReport(wast.name, dropped=conv.dropped)
    report.counts["dropped"] = sum(1 for d in conv.dropped if d.head in CHECKED)
    report.counts["fields removed"] = sum(1 for d in conv.dropped if d.head.startswith("field:"))
    report.counts["dropped (execution commands)"] = (
        len(conv.dropped) - report.counts["dropped"] - report.counts["fields removed"]
    )
    base = conv.json_path.parent
    for cmd in json.loads(conv.json_path.read_text())["commands"]:
        kind, line = cmd["type"], cmd["line"]
        where = f"{wast.name}:{line}"
        if kind not in CHECKED:
            continue
        filename = cmd.get("filename", "")
        if kind == "module" and not filename:
            continue
        if cmd.get("module_type") == "text" or filename.endswith(".wat"):
            report.counts[f"{kind} (text, skipped)"] += 1
            continue
        data = (base / filename).read_bytes()
        error = _check(data)
        expected = {
            "module": None,
            "assert_unlinkable": None,
            "assert_uninstantiable": None,
            "assert_invalid": InvalidError,
            "assert_malformed": MalformedError,
        }[kind]
        text = cmd.get("text", "")
        if type(error) is (expected or type(None)):
            report.counts[f"{kind} ok"] += 1
        elif (
            kind == "assert_invalid"
            and isinstance(error, MalformedError)
            and error.message.startswith(ENCODING_ARTEFACTS)
        ):
            report.counts[f"{kind} ok (malformed by encoding)"] += 1
        else:
            got = "accepted" if error is None else str(error)
            want = "accepted" if expected is None else expected.kind
            report.mismatches.append(f"{where}: {kind} {text!r}: expected {want}, got {got}")
    return report


def _check(data: bytes) -> WasmError | None:
    try:
        validate(read_module(data))
    except WasmError as e:
        return e
    return None
