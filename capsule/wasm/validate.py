"""Validation of a decoded module: the type system of the WebAssembly spec (2.0, plus the 3.0 relaxations of
constant expressions), so the compiler can rely on well-typed input.

Function bodies are checked with the spec appendix's algorithm: an operand stack of value types (None stands
for the unknown type that appears after ``unreachable``, ``br``, ``return`` or ``br_table`` make the rest of a
block dead, where the stack becomes polymorphic) and a stack of control frames, one per open block. Every
error is an ``InvalidError`` naming the instruction, the function and the byte offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidError, UnsupportedError, WasmError
from .module import (
    BlockType,
    BrTable,
    ExternKind,
    FuncType,
    GlobalType,
    Instr,
    Limits,
    MemArg,
    Module,
    SegmentMode,
    TableType,
    ValType,
)
from .opcodes import NATURAL_ALIGN, SIGNATURE, Op, op_name

MAX_PAGES = 65536  # 4 GiB of 64 KiB pages
_CONST_OPS = {
    Op.I32_CONST,
    Op.I64_CONST,
    Op.F32_CONST,
    Op.F64_CONST,
    Op.REF_NULL,
    Op.REF_FUNC,
    Op.GLOBAL_GET,
    Op.END,
    Op.I32_ADD,
    Op.I32_SUB,
    Op.I32_MUL,
    Op.I64_ADD,
    Op.I64_SUB,
    Op.I64_MUL,
}
_MEMORY_OPS = {Op.MEMORY_SIZE, Op.MEMORY_GROW, Op.MEMORY_FILL, Op.MEMORY_COPY, Op.MEMORY_INIT}


@dataclass
class _Context:
    """What instructions may refer to (the spec's context C), flattened over imports and definitions."""

    module: Module
    types: list[FuncType]
    funcs: list[int]  # type index per function
    tables: list[TableType]
    memories: int
    globals: list[GlobalType]
    elems: list[ValType]
    datas: int
    refs: set[int]  # functions that ref.func may name in code


@dataclass(slots=True)
class _Frame:
    op: int
    params: tuple[ValType, ...]
    results: tuple[ValType, ...]
    height: int
    unreachable: bool = False
    has_else: bool = False

    def labels(self) -> tuple[ValType, ...]:
        return self.params if self.op == Op.LOOP else self.results


def validate(m: Module) -> None:
    """Raise InvalidError if ``m`` is not valid (UnsupportedError if valid but not implemented here)."""
    types = m.types
    ctx = _Context(m, types, [], m.all_tables(), len(m.all_memories()), [], [], 0, set())
    for imp in m.imports:
        if imp.kind == ExternKind.FUNC and not imp.desc_as(int) < len(types):
            raise InvalidError(f"unknown type {imp.desc} in import {imp.module}.{imp.name}", imp.offset)
    ctx.funcs = m.func_type_indices()
    for f in m.funcs:
        if f.type_index >= len(types):
            raise InvalidError(f"unknown type {f.type_index} for function body", f.offset)
    for t in ctx.tables:
        _check_limits(t.limits, 0xFFFF_FFFF, "table")
    for mem in m.all_memories():
        _check_limits(mem.limits, MAX_PAGES, "memory")

    # Every function a ref.func may name in code: those referenced outside function bodies.
    for exp in m.exports:
        if exp.kind == ExternKind.FUNC:
            ctx.refs.add(exp.index)
    for expr in [g.init for g in m.globals] + [item for e in m.elems for item in e.items]:
        ctx.refs.update(i.imm_as(int) for i in expr if i.op == Op.REF_FUNC)

    ctx.globals = [imp.desc_as(GlobalType) for imp in m.imports if imp.kind == ExternKind.GLOBAL]
    for g in m.globals:
        _check_const(ctx, g.init, g.type.type, "global initializer")
        ctx.globals.append(g.type)
    for e in m.elems:
        for item in e.items:
            _check_const(ctx, item, e.type, "element segment item")
        if e.mode == SegmentMode.ACTIVE:
            if e.table >= len(ctx.tables):
                raise InvalidError(f"unknown table {e.table} in element segment", e.offset)
            if ctx.tables[e.table].elem != e.type:
                raise InvalidError(
                    f"type mismatch: element segment of {e.type} for a table of {ctx.tables[e.table].elem}",
                    e.offset,
                )
            _check_const(ctx, e.offset_expr or [], ValType.I32, "element segment offset")
        ctx.elems.append(e.type)
    ctx.datas = m.data_count if m.data_count is not None else len(m.datas)
    for d in m.datas:
        if d.mode == SegmentMode.ACTIVE:
            if d.memory >= ctx.memories:
                raise InvalidError(f"unknown memory {d.memory} in data segment", d.offset)
            _check_const(ctx, d.offset_expr or [], ValType.I32, "data segment offset")

    if m.start is not None:
        if m.start >= len(ctx.funcs):
            raise InvalidError(f"unknown function {m.start} as start function")
        ft = types[ctx.funcs[m.start]]
        if ft.params or ft.results:
            raise InvalidError(f"start function {m.start} has type {ft}, must be [] -> []")
    seen: set[str] = set()
    limits = {
        ExternKind.FUNC: len(ctx.funcs),
        ExternKind.TABLE: len(ctx.tables),
        ExternKind.MEMORY: ctx.memories,
        ExternKind.GLOBAL: len(ctx.globals),
    }
    for exp in m.exports:
        if exp.name in seen:
            raise InvalidError(f"duplicate export name {exp.name!r}", exp.offset)
        seen.add(exp.name)
        if exp.index >= limits[exp.kind]:
            raise InvalidError(f"unknown {exp.kind} {exp.index} in export {exp.name!r}", exp.offset)

    base = m.num_imported_funcs
    for i, f in enumerate(m.funcs):
        try:
            ft = types[f.type_index]
            _Body(ctx, f.locals, ft.results).check(f.body)
        except WasmError as e:
            if e.func is None:
                e.func, e.func_name = base + i, m.func_name(base + i)
            raise
    if ctx.memories > 1:
        raise UnsupportedError(f"multiple memories ({ctx.memories})")


def _check_limits(lim: Limits, bound: int, what: str) -> None:
    if lim.min > bound or (lim.max is not None and lim.max > bound):
        raise InvalidError(f"{what} size must be at most {bound} ({lim})")
    if lim.max is not None and lim.min > lim.max:
        raise InvalidError(f"{what} size minimum must not be greater than maximum ({lim})")


def _check_const(ctx: _Context, expr: list[Instr], expected: ValType, what: str) -> None:
    """A constant expression: constants, references, immutable globals (and 3.0's integer add/sub/mul)."""
    for ins in expr:
        if ins.op not in _CONST_OPS:
            raise InvalidError(
                f"constant expression required in {what}: {op_name(ins.op)} is not constant", ins.offset
            )
        if ins.op == Op.GLOBAL_GET:
            index = ins.imm_as(int)
            if index >= len(ctx.globals):
                raise InvalidError(f"unknown global {index} in {what}", ins.offset)
            if ctx.globals[index].mutable:
                raise InvalidError(
                    f"constant expression required in {what}: global {index} is mutable", ins.offset
                )
    _Body(ctx, (), (expected,), const=True).check(expr)


class _Body:
    """Type-checks one instruction sequence (a function body or a constant expression)."""

    def __init__(
        self,
        ctx: _Context,
        local_types: tuple[ValType, ...],
        results: tuple[ValType, ...],
        const: bool = False,
    ) -> None:
        self.ctx = ctx
        self.local_types = local_types
        self.results = results
        self.const = const
        self.vals: list[ValType | None] = []
        self.frames: list[_Frame] = []
        self.ins: Instr = Instr(Op.NOP)

    # ---- the operand and control stacks ----

    def fail(self, message: str) -> InvalidError:
        return InvalidError(message, self.ins.offset)

    def mismatch(self, expected: object, got: object) -> InvalidError:
        return self.fail(f"type mismatch in {op_name(self.ins.op)}: expected {expected}, got {got}")

    def pop(self, expect: ValType | None = None) -> ValType | None:
        frame = self.frames[-1]
        if len(self.vals) == frame.height:
            if frame.unreachable:
                return None  # the unknown type: popping below a dead block's base
            raise self.mismatch(expect or "a value", "an empty stack")
        actual = self.vals.pop()
        if expect is not None and actual is not None and actual != expect:
            raise self.mismatch(expect, actual)
        return actual

    def pop_all(self, types: tuple[ValType, ...]) -> None:
        for t in reversed(types):
            self.pop(t)

    def push_frame(self, op: int, params: tuple[ValType, ...], results: tuple[ValType, ...]) -> None:
        self.frames.append(_Frame(op, params, results, len(self.vals)))
        self.vals.extend(params)

    def pop_frame(self) -> _Frame:
        if not self.frames:
            raise self.fail("unexpected end: no open block")
        frame = self.frames[-1]
        self.pop_all(frame.results)
        if len(self.vals) != frame.height:
            raise self.fail(
                f"type mismatch in {op_name(self.ins.op)}: "
                f"{len(self.vals) - frame.height} values remaining on the stack at the end of the block"
            )
        self.frames.pop()
        return frame

    def set_unreachable(self) -> None:
        frame = self.frames[-1]
        del self.vals[frame.height :]
        frame.unreachable = True

    def label(self, depth: int) -> tuple[ValType, ...]:
        if depth >= len(self.frames):
            raise self.fail(f"unknown label {depth} in {op_name(self.ins.op)}")
        return self.frames[-1 - depth].labels()

    def block_type(self, bt: BlockType) -> tuple[tuple[ValType, ...], tuple[ValType, ...]]:
        if bt.type_index is not None:
            if bt.type_index >= len(self.ctx.types):
                raise self.fail(f"unknown type {bt.type_index} in block type")
            ft = self.ctx.types[bt.type_index]
            return ft.params, ft.results
        return (), (() if bt.result is None else (bt.result,))

    # ---- index checks ----

    def table(self, index: int) -> TableType:
        if index >= len(self.ctx.tables):
            raise self.fail(f"unknown table {index} in {op_name(self.ins.op)}")
        return self.ctx.tables[index]

    def memory(self) -> None:
        if self.ctx.memories == 0:
            raise self.fail(f"unknown memory 0 in {op_name(self.ins.op)}")

    def data(self, index: int) -> None:
        if index >= self.ctx.datas:
            raise self.fail(f"unknown data segment {index} in {op_name(self.ins.op)}")

    def elem(self, index: int) -> ValType:
        if index >= len(self.ctx.elems):
            raise self.fail(f"unknown elem segment {index} in {op_name(self.ins.op)}")
        return self.ctx.elems[index]

    def func_type(self, index: int) -> FuncType:
        if index >= len(self.ctx.funcs):
            raise self.fail(f"unknown function {index} in {op_name(self.ins.op)}")
        return self.ctx.types[self.ctx.funcs[index]]

    def local(self, index: int) -> ValType:
        if index >= len(self.local_types):
            raise self.fail(f"unknown local {index} in {op_name(self.ins.op)}")
        return self.local_types[index]

    def global_(self, index: int) -> GlobalType:
        if index >= len(self.ctx.globals):
            raise self.fail(f"unknown global {index} in {op_name(self.ins.op)}")
        return self.ctx.globals[index]

    # ---- the instructions ----

    def check(self, body: list[Instr]) -> None:
        self.push_frame(Op.BLOCK, (), self.results)
        vals = self.vals
        for ins in body:
            self.ins = ins
            if not self.frames:
                raise self.fail("instructions after the final end")
            op = ins.op
            sig = SIGNATURE.get(op)
            if sig is not None:
                if op in NATURAL_ALIGN:
                    self.memory()
                    arg = ins.imm_as(MemArg)
                    if arg.align > NATURAL_ALIGN[op]:
                        raise self.fail(
                            f"alignment must not be larger than natural in {op_name(op)}: "
                            f"2**{arg.align} > {1 << NATURAL_ALIGN[op]}"
                        )
                elif op >= Op.MEMORY_SIZE:
                    self.special_plain(op, ins)
                params, results = sig
                for t in reversed(params):
                    # inlined self.pop(t) for the common case
                    if len(vals) > self.frames[-1].height and vals[-1] == t:
                        vals.pop()
                    else:
                        self.pop(t)
                vals.extend(results)
            else:
                self.control_or_variable(op, ins)
        if self.frames:
            raise self.fail("unexpected end: missing end")

    def special_plain(self, op: int, ins: Instr) -> None:
        """Index checks for instructions whose stack typing is fixed but which name a memory/table/segment."""
        if op in _MEMORY_OPS:
            self.memory()
            if op == Op.MEMORY_INIT:
                self.data(ins.imm_pair()[0])
        elif op == Op.DATA_DROP:
            self.data(ins.imm_as(int))
        elif op == Op.TABLE_SIZE:
            self.table(ins.imm_as(int))
        elif op == Op.ELEM_DROP:
            self.elem(ins.imm_as(int))
        elif op == Op.TABLE_INIT:
            seg, table = ins.imm_pair()
            t = self.table(table)
            et = self.elem(seg)
            if t.elem != et:
                raise self.mismatch(f"a segment of {t.elem}", f"a segment of {et}")
        elif op == Op.TABLE_COPY:
            dst, src = ins.imm_pair()
            td, ts = self.table(dst), self.table(src)
            if td.elem != ts.elem:
                raise self.mismatch(f"a source table of {td.elem}", f"{ts.elem}")

    def control_or_variable(self, op: int, ins: Instr) -> None:
        imm = ins.imm
        if op == Op.LOCAL_GET:
            self.vals.append(self.local(ins.imm_as(int)))
        elif op == Op.LOCAL_SET:
            self.pop(self.local(ins.imm_as(int)))
        elif op == Op.LOCAL_TEE:
            t = self.local(ins.imm_as(int))
            self.pop(t)
            self.vals.append(t)
        elif op == Op.GLOBAL_GET:
            self.vals.append(self.global_(ins.imm_as(int)).type)
        elif op == Op.GLOBAL_SET:
            g = self.global_(ins.imm_as(int))
            if not g.mutable:
                raise self.fail(f"global is immutable: global.set of global {imm}")
            self.pop(g.type)
        elif op == Op.END:
            frame = self.pop_frame()
            if frame.op == Op.IF and not frame.has_else and frame.params != frame.results:
                raise self.fail(
                    f"type mismatch in if without else: [{' '.join(map(str, frame.params))}] -> "
                    f"[{' '.join(map(str, frame.results))}] needs an else branch"
                )
            self.vals.extend(frame.results)
        elif op in (Op.BLOCK, Op.LOOP, Op.IF):
            params, results = self.block_type(ins.imm_as(BlockType))
            if op == Op.IF:
                self.pop(ValType.I32)
            self.pop_all(params)
            self.push_frame(op, params, results)
        elif op == Op.ELSE:
            frame = self.pop_frame()
            self.push_frame(Op.IF, frame.params, frame.results)
            self.frames[-1].has_else = True
        elif op == Op.BR:
            self.pop_all(self.label(ins.imm_as(int)))
            self.set_unreachable()
        elif op == Op.BR_IF:
            types = self.label(ins.imm_as(int))
            self.pop(ValType.I32)
            self.pop_all(types)
            self.vals.extend(types)
        elif op == Op.BR_TABLE:
            self.br_table(ins.imm_as(BrTable))
        elif op == Op.RETURN:
            self.pop_all(self.results)
            self.set_unreachable()
        elif op == Op.UNREACHABLE:
            self.set_unreachable()
        elif op == Op.CALL:
            ft = self.func_type(ins.imm_as(int))
            self.pop_all(ft.params)
            self.vals.extend(ft.results)
        elif op == Op.CALL_INDIRECT:
            type_index, table = ins.imm_pair()
            if self.table(table).elem != ValType.FUNCREF:
                raise self.mismatch(f"a table of {ValType.FUNCREF}", f"a table of {self.table(table).elem}")
            if type_index >= len(self.ctx.types):
                raise self.fail(f"unknown type {type_index} in call_indirect")
            ft = self.ctx.types[type_index]
            self.pop(ValType.I32)
            self.pop_all(ft.params)
            self.vals.extend(ft.results)
        elif op == Op.DROP:
            self.pop()
        elif op == Op.SELECT:
            self.pop(ValType.I32)
            t1, t2 = self.pop(), self.pop()
            if (t1 is not None and not t1.is_num) or (t2 is not None and not t2.is_num):
                raise self.mismatch("numeric operands (select of references needs a type)", f"{t2} and {t1}")
            if t1 is not None and t2 is not None and t1 != t2:
                raise self.mismatch(t1, t2)
            self.vals.append(t1 if t1 is not None else t2)
        elif op == Op.SELECT_T:
            selected: tuple[ValType, ...] = ins.imm_as(tuple)
            if len(selected) != 1:
                raise self.fail(f"invalid result arity {len(selected)} in typed select")
            self.pop(ValType.I32)
            self.pop(selected[0])
            self.pop(selected[0])
            self.vals.append(selected[0])
        elif op == Op.REF_NULL:
            self.vals.append(ins.imm_as(ValType))
        elif op == Op.REF_IS_NULL:
            ref = self.pop()
            if ref is not None and not ref.is_ref:
                raise self.mismatch("a reference", ref)
            self.vals.append(ValType.I32)
        elif op == Op.REF_FUNC:
            self.func_type(ins.imm_as(int))
            if not self.const and imm not in self.ctx.refs:
                raise self.fail(
                    f"undeclared function reference: ref.func {imm} (not in an elem, export or global)"
                )
            self.vals.append(ValType.FUNCREF)
        elif op in (Op.TABLE_GET, Op.TABLE_SET, Op.TABLE_GROW, Op.TABLE_FILL):
            et = self.table(ins.imm_as(int)).elem
            if op == Op.TABLE_GET:
                self.pop(ValType.I32)
                self.vals.append(et)
            elif op == Op.TABLE_SET:
                self.pop(et)
                self.pop(ValType.I32)
            elif op == Op.TABLE_GROW:
                self.pop(ValType.I32)
                self.pop(et)
                self.vals.append(ValType.I32)
            else:
                self.pop(ValType.I32)
                self.pop(et)
                self.pop(ValType.I32)
        else:  # pragma: no cover - the decoder only produces known opcodes
            raise self.fail(f"no typing rule for {op_name(op)}")

    def br_table(self, imm: BrTable) -> None:
        self.pop(ValType.I32)
        default = self.label(imm.default)
        arity = len(default)
        for depth in imm.labels:
            types = self.label(depth)
            if len(types) != arity:
                raise self.fail(
                    f"type mismatch in br_table: label {depth} has arity {len(types)}, "
                    f"the default label {imm.default} has {arity}"
                )
            popped = []
            for t in reversed(types):
                popped.append(self.pop(t))
            self.vals.extend(reversed(popped))
        self.pop_all(default)
        self.set_unreachable()
