"""Executing WebAssembly spec scripts (``.wast``) in the kernel: compile each module, run its assertions.

``capsule.wasm.wast`` converts a script with wabt's ``wast2json`` (JSON commands plus one binary per module)
and checks decoding and validation. This module runs the rest: every ``module`` is compiled in checked mode
and instantiated (one ``Instance`` per module, closed when the script ends), then ``invoke``/``get`` actions
and the ``assert_return``/``assert_trap``/``assert_exhaustion`` checks run against it, in the script's order.

What capsule cannot run yet is *skipped with a reason*, never silently: the compiler raises
``UnsupportedError`` naming the function for float arithmetic (soft-float is a later issue) and for calls to
imported (host) functions. Rather than losing a whole module to one such function, the executor replaces
that function's body with ``unreachable`` and recompiles; an assertion is then skipped only when the
function it calls can reach a replaced one (directly, or through a table). Any other compile error, and
anything else that goes wrong, is a failure.

Values follow wast2json: integers as unsigned decimal strings, floats as their raw bits, so results compare
bit for bit; ``nan:canonical``/``nan:arithmetic`` compare by class.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsule.bpf.spec import ObjectSpec
from capsule.compiler import CompileError, Options, compile_module
from capsule.runtime.errors import CallError, GuestRejected, GuestTrap, Pending
from capsule.runtime.instance import Instance
from capsule.wasm import (
    ExternKind,
    FuncType,
    GlobalType,
    Instr,
    Limits,
    MemoryType,
    Module,
    Op,
    TableType,
    ValType,
    WasmError,
    read_module,
    validate,
)
from capsule.wasm.errors import InvalidError, MalformedError
from capsule.wasm.wast import convert

#: How long one invocation may run before it counts as hung (a miscompiled loop must not hang the suite).
CALL_TIMEOUT_S = 20.0

I32, I64, F32, F64 = ValType.I32, ValType.I64, ValType.F32, ValType.F64

#: The ``spectest`` module every script may import from (values as the reference interpreter defines them).
SPECTEST_GLOBALS: dict[str, tuple[GlobalType, int]] = {
    "global_i32": (GlobalType(I32, False), 666),
    "global_i64": (GlobalType(I64, False), 666),
    "global_f32": (GlobalType(F32, False), 0x4426A666),  # 666.6f
    "global_f64": (GlobalType(F64, False), 0x4084D4CCCCCCCCCD),  # 666.6
}
SPECTEST_FUNCS: dict[str, FuncType] = {
    "print": FuncType((), ()),
    "print_i32": FuncType((I32,), ()),
    "print_i64": FuncType((I64,), ()),
    "print_f32": FuncType((F32,), ()),
    "print_f64": FuncType((F64,), ()),
    "print_i32_f32": FuncType((I32, F32), ()),
    "print_f64_f64": FuncType((F64, F64), ()),
}
SPECTEST_MEMORY_LIMITS = (1, 2)
SPECTEST_TABLE_LIMITS = (10, 20)

#: Skip categories (the only reasons an assertion may be skipped).
SKIP_FLOAT = "float arithmetic the compiler cannot lower"
SKIP_HOST_CALL = "calls an imported function (host functions not implemented yet)"
TEXT_ONLY = "text-format module (capsule reads binaries only)"
DROPPED = "its definition is in a module field wast2json 1.0.32 cannot convert (dropped)"


@dataclass
class Result:
    """The outcome of one command: ``status`` is passed, skipped, failed, or n/a (text-only forms)."""

    line: int
    kind: str
    status: str
    detail: str = ""
    module_line: int | None = None  # for actions: the line of the module they ran against


@dataclass
class ExecReport:
    """All outcomes of one script, with counts per (status, category)."""

    name: str
    results: list[Result] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    compile_seconds: float = 0.0
    load_seconds: float = 0.0

    def add(self, line: int, kind: str, status: str, detail: str = "", module_line: int | None = None) -> None:
        self.results.append(Result(line, kind, status, detail, module_line))

    @property
    def counts(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for r in self.results:
            if r.status == "passed":
                c["validation passed" if r.kind in _VALIDATION else "passed"] += 1
            elif r.status == "skipped":
                c["skipped: float" if r.detail.startswith(SKIP_FLOAT) else "skipped: host call"] += 1
            elif r.status == "n/a":
                c["n/a: text" if r.detail == TEXT_ONLY else "n/a: dropped"] += 1
            else:
                c[r.status] += 1
        return c

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.status == "failed"]


_VALIDATION = ("assert_invalid", "assert_malformed")


@dataclass
class Loaded:
    """A module of the script: its instance (None when it could not be built) and what cannot be called."""

    module: Module | None
    instance: Instance | None
    #: exported function name -> reason it is skipped (it reaches a function capsule cannot compile yet)
    skipped: dict[str, str] = field(default_factory=dict)
    #: why the whole module is unusable: ("skipped" | "failed", reason)
    broken: tuple[str, str] | None = None
    line: int = 0


class LinkError(Exception):
    """An import cannot be satisfied (the spec's "unlinkable")."""


# -- values -------------------------------------------------------------------------------------------------

# a wast2json command, action or value: a JSON object, read by key
JsonObject = dict[str, Any]

_WIDTH = {"i32": 32, "f32": 32, "i64": 64, "f64": 64}


def parse_arg(v: JsonObject) -> int:
    """A wast2json argument as the raw bits ``Instance.call`` takes."""
    t, s = v["type"], v["value"]
    if t in _WIDTH:
        return int(s) & ((1 << _WIDTH[t]) - 1)
    if t in ("funcref", "externref"):
        return 0 if s == "null" else int(s) + 1
    raise ValueError(f"argument of type {t} (not supported)")


def matches(expected: JsonObject, got: int) -> bool:
    """Whether a result (``Instance`` form: signed ints, float bits) is what wast2json expects."""
    t, s = expected["type"], expected.get("value")
    if t in ("funcref", "externref"):
        return got == 0 if s == "null" else got != 0
    width = _WIDTH[t]
    bits = got & ((1 << width) - 1)
    if s in ("nan:canonical", "nan:arithmetic"):
        exp_bits, mant = (8, 23) if width == 32 else (11, 52)
        quiet = ((1 << exp_bits) - 1) << mant | 1 << (mant - 1)
        magnitude = bits & ((1 << (width - 1)) - 1)
        return magnitude == quiet if s == "nan:canonical" else bits & quiet == quiet
    assert s is not None, expected  # wast2json writes every number's value
    return bits == int(s) & ((1 << width) - 1)


def show(values: list[JsonObject]) -> str:
    return "(" + ", ".join(f"{v['type']}:{v.get('value')}" for v in values) + ")"


# -- which functions cannot be compiled yet -----------------------------------------------------------------


def _skip_reason(err: CompileError) -> str | None:
    """The skip category of a compile error, or None when it is a real failure."""
    msg = err.message
    if "imported function" in msg:
        return f"{SKIP_HOST_CALL}: {msg}"
    if msg.startswith("instruction ") and ("f32" in msg or "f64" in msg):
        return f"{SKIP_FLOAT}: {msg.removeprefix('instruction ')}"
    return None


def _stub(module: Module, func: int) -> None:
    """Replace a defined function's body with ``unreachable`` (its signature and locals stay)."""
    f = module.defined_func(func)
    assert f is not None
    f.body = [Instr(Op.UNREACHABLE, offset=f.offset), Instr(Op.END, offset=f.offset)]


def _taint(module: Module, stubbed: dict[int, str]) -> dict[int, str]:
    """Every function that can reach a stubbed one, with the reason: by direct calls, and by a
    ``call_indirect`` of signature T when a function of signature T that is placed in a table (or named by
    ``ref.func``) is affected (any other signature would trap before the call)."""
    calls: dict[int, set[int]] = {}
    indirect: dict[int, set[FuncType]] = {}
    referenced: set[int] = set()
    for k, f in enumerate(module.funcs):
        idx = module.num_imported_funcs + k
        calls[idx], indirect[idx] = set(), set()
        for ins in f.body:
            if ins.op == Op.CALL:
                calls[idx].add(ins.imm_as(int))
            elif ins.op == Op.CALL_INDIRECT:
                indirect[idx].add(module.types[ins.imm_pair()[0]])
            elif ins.op == Op.REF_FUNC:
                referenced.add(ins.imm_as(int))
    for el in module.elems:
        for expr in el.items:
            if expr and expr[0].op == Op.REF_FUNC:
                referenced.add(expr[0].imm_as(int))
    for g in module.globals:
        if g.init and g.init[0].op == Op.REF_FUNC:
            referenced.add(g.init[0].imm_as(int))
    tainted = dict(stubbed)
    changed = True
    while changed:
        changed = False
        via_table: dict[FuncType, str] = {}
        for r in sorted(referenced):
            if r in tainted:
                via_table.setdefault(module.func_type(r), tainted[r])
        for idx, callees in calls.items():
            if idx in tainted:
                continue
            hit = next((tainted[c] for c in sorted(callees) if c in tainted), None)
            if hit is None:
                hit = next((via_table[t] for t in indirect[idx] if t in via_table), None)
            if hit is not None:
                tainted[idx] = hit
                changed = True
    return tainted


def compile_skipping(data: bytes, options: Options) -> tuple[Module, ObjectSpec, dict[int, str]]:
    """Compile, replacing each function capsule cannot lower yet (for a skip reason) until it compiles.

    Returns (module, object spec, function index -> skip reason for every function that reaches a replaced
    one). Raises ``CompileError`` for errors that are not a skip category."""
    module = read_module(data)
    validate(module)
    stubbed: dict[int, str] = {}
    while True:
        try:
            spec = compile_module(module, options)
        except CompileError as e:
            reason = _skip_reason(e)
            if reason is None or e.func is None or e.func in stubbed or module.defined_func(e.func) is None:
                raise
            stubbed[e.func] = reason
            _stub(module, e.func)
            continue
        return module, spec, _taint(module, stubbed)


# -- the script runner --------------------------------------------------------------------------------------


class WastExecutor:
    """Runs one converted script. Use as a context manager (or call ``close``): it owns every Instance."""

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options(checked=True)
        self.current: Loaded | None = None
        self.named: dict[str, Loaded] = {}
        self.registered: dict[str, Loaded] = {}
        self.all: list[Loaded] = []
        #: wast2json could not convert some module fields: a missing export may be one of them
        self.dropped_fields = False

    def close(self) -> None:
        for m in self.all:
            if m.instance is not None:
                m.instance.close()
                m.instance = None
        self.all.clear()

    def __enter__(self) -> WastExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- modules --------------------------------------------------------------------------------------------
    def instantiate(self, data: bytes, line: int, report: ExecReport) -> Loaded:
        """Compile and instantiate; raises ``LinkError``/``GuestTrap``/``CallError`` from linking or
        instantiation, ``CompileError`` for what cannot be compiled (not a skip category)."""
        t0 = time.perf_counter()
        module, spec, tainted = compile_skipping(data, self.options)
        report.compile_seconds += time.perf_counter() - t0
        imports = self.link(module)
        loaded = Loaded(module, None, line=line)
        if module.start is not None and module.start in tainted:
            loaded.broken = ("skipped", tainted[module.start])
            return loaded
        for e in module.exports:
            if e.kind == ExternKind.FUNC and e.index in tainted:
                loaded.skipped[e.name] = tainted[e.index]
        t0 = time.perf_counter()
        loaded.instance = Instance(spec, imports=imports)
        report.load_seconds += time.perf_counter() - t0
        self.all.append(loaded)
        return loaded

    def link(self, module: Module) -> dict[tuple[str, str], int]:
        """Check every import against what ``spectest`` and the registered modules export; returns the
        values of imported globals (for ``Instance(imports=...)``)."""
        values: dict[tuple[str, str], int] = {}
        for imp in module.imports:
            where = f"{imp.module}.{imp.name}"
            if imp.module == "spectest":
                kind, typ, value = _spectest_export(imp.name)
            elif imp.module in self.registered:
                kind, typ, value = self._registered_export(self.registered[imp.module], imp.name)
            else:
                raise LinkError(f"unknown import {where}")
            if kind != imp.kind:
                raise LinkError(f"incompatible import type for {where}: {kind.name} given, {imp.kind.name} wanted")
            want = module.types[imp.desc_as(int)] if imp.kind == ExternKind.FUNC else imp.desc
            if not _import_fits(kind, typ, want):
                raise LinkError(f"incompatible import type for {where}: {typ} given, {want} wanted")
            if kind == ExternKind.GLOBAL:
                values[(imp.module, imp.name)] = value
        return values

    def _registered_export(self, owner: Loaded, name: str) -> tuple[ExternKind, object, int]:
        m = owner.module
        assert m is not None
        e = m.export(name)
        if e is None:
            raise LinkError(f"unknown import: {name} is not exported")
        if e.kind == ExternKind.FUNC:
            return e.kind, m.func_type(e.index), 0
        if e.kind == ExternKind.GLOBAL:
            value = owner.instance.global_value(name) if owner.instance is not None else 0
            return e.kind, m.all_globals()[e.index], value
        if e.kind == ExternKind.TABLE:
            return e.kind, m.all_tables()[e.index], 0
        return e.kind, m.all_memories()[e.index], 0

    def resolve(self, name: str | None) -> Loaded | None:
        return self.named.get(name) if name else self.current

    # -- actions --------------------------------------------------------------------------------------------
    def act(self, action: JsonObject) -> list[int]:
        """Perform an ``invoke``/``get`` on its module (must be usable: checked by the caller)."""
        target = self.resolve(action.get("module"))
        assert target is not None and target.instance is not None
        inst = target.instance
        if action["type"] == "get":
            return [inst.global_value(action["field"])]
        args = [parse_arg(a) for a in action["args"]]
        return _call(inst, action["field"], args)

    def usable(self, action: JsonObject) -> tuple[str, str] | None:
        """Why an action cannot run: ("skipped" | "failed", reason), or None when it can."""
        name = action.get("module")
        target = self.resolve(name)
        if target is None:
            return "failed", f"no module {name or '(current)'}"
        if target.broken is not None:
            return target.broken
        if action["type"] == "invoke" and action["field"] in target.skipped:
            return "skipped", target.skipped[action["field"]]
        if target.module is not None and target.module.export(action["field"]) is None and self.dropped_fields:
            return "n/a", DROPPED
        return None

    # -- commands -------------------------------------------------------------------------------------------
    def run(self, commands: list[JsonObject], base: Path, report: ExecReport) -> None:
        for cmd in commands:
            try:
                self.command(cmd, base, report)
            except Exception as e:  # one broken command must not hide the others
                detail = f"executor error: {type(e).__name__}: {e}"
                report.add(cmd["line"], cmd["type"], "failed", detail)
                if cmd["type"] == "module":
                    self.current = Loaded(None, None, broken=("failed", f"module at line {cmd['line']}: {detail}"),
                                          line=cmd["line"])
                    if cmd.get("name"):
                        self.named[cmd["name"]] = self.current

    def command(self, cmd: JsonObject, base: Path, report: ExecReport) -> None:
        kind, line = cmd["type"], cmd["line"]
        if kind == "module":
            self.command_module(cmd, base, report)
        elif kind == "register":
            target = self.resolve(cmd.get("name"))
            if target is None:
                report.add(line, kind, "failed", "nothing to register")
            else:
                self.registered[cmd["as"]] = target
        elif kind in ("action", "assert_return", "assert_trap", "assert_exhaustion"):
            self.command_action(cmd, report)
        elif kind in _VALIDATION:
            self.command_rejected(cmd, base, report)
        elif kind in ("assert_unlinkable", "assert_uninstantiable"):
            self.command_uninstantiable(cmd, base, report)
        else:
            report.add(line, kind, "failed", f"unknown command {kind}")

    def command_module(self, cmd: JsonObject, base: Path, report: ExecReport) -> None:
        line = cmd["line"]
        try:
            loaded = self.instantiate((base / cmd["filename"]).read_bytes(), line, report)
        except (WasmError, LinkError, GuestTrap, GuestRejected, CallError) as e:
            why = f"module at line {line}: {type(e).__name__}: {e}"
            loaded = Loaded(None, None, broken=("failed", why), line=line)
            report.add(line, "module", "failed", why)
        else:
            if loaded.broken is not None:
                report.add(line, "module", *loaded.broken)
            else:
                report.add(line, "module", "passed")
        self._retire(self.current)
        self.current = loaded
        if cmd.get("name"):
            self.named[cmd["name"]] = loaded

    def _retire(self, old: Loaded | None) -> None:
        """Close the module a new one replaces as the current one when no name or registration reaches it:
        a spec file instantiates module after module, and on the map window each holds its maps' memory whole
        (a 3 GiB VM on 6.1 ran out of memory with all of int_exprs' modules open)."""
        if old is None or old.instance is None or any(old is m for m in (*self.named.values(),
                                                                        *self.registered.values())):
            return
        old.instance.close()
        old.instance = None
        self.all = [m for m in self.all if m is not old]

    def command_action(self, cmd: JsonObject, report: ExecReport) -> None:
        kind, line, action = cmd["type"], cmd["line"], cmd["action"]
        target = self.resolve(action.get("module"))

        def add(status: str, detail: str = "") -> None:
            report.add(line, kind, status, detail, target.line if target is not None else None)

        why = self.usable(action)
        if why is not None:
            add(*why)
            return
        what = f"{action['field']}{show(action.get('args', []))}"
        try:
            got = self.act(action)
        except GuestTrap as e:
            expected = cmd.get("text", "")
            if kind in ("assert_trap", "assert_exhaustion") and e.message.startswith(expected):
                add("passed")
            else:
                want = f"trap {expected!r}" if kind != "assert_return" and kind != "action" else "no trap"
                add("failed", f"{what}: trapped {e.message!r}, expected {want}")
            return
        except (CallError, TimeoutError) as e:
            add("failed", f"{what}: {type(e).__name__}: {e}")
            return
        if kind == "action":
            add("passed")
        elif kind == "assert_return":
            expected = cmd["expected"]
            if len(got) == len(expected) and all(matches(x, g) for x, g in zip(expected, got, strict=True)):
                add("passed")
            else:
                add("failed", f"{what}: got {got}, expected {show(expected)}")
        else:
            add("failed", f"{what}: returned {got}, expected trap {cmd.get('text')!r}")

    def command_rejected(self, cmd: JsonObject, base: Path, report: ExecReport) -> None:
        kind, line = cmd["type"], cmd["line"]
        filename = cmd.get("filename", "")
        if cmd.get("module_type") == "text" or filename.endswith(".wat"):
            report.add(line, kind, "n/a", TEXT_ONLY)
            return
        try:
            validate(read_module((base / filename).read_bytes()))
        except (InvalidError, MalformedError):
            report.add(line, kind, "passed")
            return
        except WasmError as e:
            report.add(line, kind, "failed", f"rejected with {e}, expected {kind.removeprefix('assert_')}")
            return
        report.add(line, kind, "failed", f"accepted, expected {kind.removeprefix('assert_')} ({cmd.get('text')})")

    def command_uninstantiable(self, cmd: JsonObject, base: Path, report: ExecReport) -> None:
        kind, line = cmd["type"], cmd["line"]
        loaded = None
        try:
            loaded = self.instantiate((base / cmd["filename"]).read_bytes(), line, report)
        except LinkError as e:
            ok = kind == "assert_unlinkable"
            report.add(line, kind, "passed" if ok else "failed", "" if ok else f"link error {e}, expected a trap")
            return
        except GuestTrap as e:
            ok = kind == "assert_uninstantiable"
            report.add(line, kind, "passed" if ok else "failed", "" if ok else f"trapped {e.message}, expected "
                       "a link error")
            return
        except CompileError as e:
            report.add(line, kind, "failed", f"compile error {e}")
            return
        if loaded.broken is not None:
            report.add(line, kind, *loaded.broken)
            return
        report.add(line, kind, "failed", f"instantiated, expected {cmd.get('text')!r}")


def _spectest_export(name: str) -> tuple[ExternKind, object, int]:
    from capsule.wasm import Limits

    if name in SPECTEST_GLOBALS:
        gt, value = SPECTEST_GLOBALS[name]
        return ExternKind.GLOBAL, gt, value
    if name in SPECTEST_FUNCS:
        return ExternKind.FUNC, SPECTEST_FUNCS[name], 0
    if name == "table":
        return ExternKind.TABLE, TableType(ValType.FUNCREF, Limits(*SPECTEST_TABLE_LIMITS)), 0
    if name == "memory":
        return ExternKind.MEMORY, MemoryType(Limits(*SPECTEST_MEMORY_LIMITS)), 0
    raise LinkError(f"unknown import spectest.{name}")


def _limits_fit(given: Limits, wanted: Limits) -> bool:
    if given.min < wanted.min:
        return False
    if wanted.max is None:
        return True
    return given.max is not None and given.max <= wanted.max


def _import_fits(kind: ExternKind, given: object, wanted: object) -> bool:
    """The spec's import matching (external subtyping) for the four kinds."""
    if kind == ExternKind.FUNC:
        return given == wanted
    if kind == ExternKind.GLOBAL:
        return given == wanted
    if kind == ExternKind.TABLE:
        assert isinstance(given, TableType) and isinstance(wanted, TableType)
        return given.elem == wanted.elem and _limits_fit(given.limits, wanted.limits)
    assert isinstance(given, MemoryType) and isinstance(wanted, MemoryType)
    return _limits_fit(given.limits, wanted.limits)


def _call(inst: Instance, name: str, args: list[int]) -> list[int]:
    """``Instance.call`` with a deadline, so a miscompiled loop fails its assertion instead of hanging."""
    deadline = time.monotonic() + CALL_TIMEOUT_S
    res = inst.start(inst.export_index(name), args, budget=1 << 24)
    while isinstance(res, Pending):
        if time.monotonic() > deadline:
            inst.reset(0)
            raise TimeoutError(f"{name} still running after {CALL_TIMEOUT_S:.0f} s")
        res = inst.resume(res.token, budget=1 << 24)
    return res


def run_script(wast: Path, cache: Path, options: Options | None = None) -> ExecReport:
    """Convert (cached) and execute one .wast script; every Instance is closed before this returns."""
    t0 = time.perf_counter()
    conv = convert(wast, cache)
    report = ExecReport(wast.name)
    report.dropped = [f"{wast.name}:{d.line} ({d.head}): {d.reason}" for d in conv.dropped]
    commands = json.loads(conv.json_path.read_text())["commands"]
    with WastExecutor(options) as ex:
        ex.dropped_fields = any(d.head.startswith("field:") for d in conv.dropped)
        ex.run(commands, conv.json_path.parent, report)
    report.seconds = time.perf_counter() - t0
    return report


__all__ = ["ExecReport", "Result", "WastExecutor", "compile_skipping", "matches", "parse_arg", "run_script"]
