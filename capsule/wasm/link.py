"""Merge a wasm32-wasi program built elsewhere with capsule's standalone WASI runtime into one module.

A program built by another toolchain (wasi-sdk, Rust, a hand-written module) imports
``wasi_snapshot_preview1.*`` directly; capsule serves WASI inside the guest, so before compiling such a program
it is merged with capsule's runtime built as a module of its own (``capsule.toolchain.guest.build_standalone_runtime``).
The merge is plain module surgery:

- index spaces are concatenated, the program's first: types, functions, tables, globals, element and data
  segments of the runtime come after the program's, and every reference in both bodies (calls, ``ref.func``,
  ``call_indirect`` types and tables, globals, segment indices, block types) is renumbered;
- each ``wasi_snapshot_preview1.X`` import of the program becomes the runtime's function exporting ``X`` (its
  C symbol, ``__imported_wasi_snapshot_preview1_X``), after checking the two types agree; imports both sides
  share (the ``capsule.*`` intrinsics) are merged; any other import of the program is refused by name;
- the runtime imports its memory: it is given the program's, grown to hold the runtime, which was linked to
  live in the pages right after the program's initial memory (``runtime_base``);
- the program's ``memory.size`` and ``memory.grow`` become calls to the runtime's
  ``capsule_program_memory_size/grow``, so the program does not take the runtime's pages for free heap (see
  ``capsule/guest/wasi_standalone/standalone.c``);
- the program's exports stay (``_start`` above all), the runtime's host protocol exports (``capsule_io``,
  ``capsule_alloc``, ``capsule_fs_*``) are added, and the memory is exported as ``memory``.

The result is validated by ``capsule.wasm.validate`` (``link_program`` does that); ``link_encode.encode``
writes it out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from .errors import WasmError
from .module import (
    BlockType,
    Data,
    Elem,
    Export,
    ExternKind,
    Function,
    FuncType,
    Global,
    Import,
    Instr,
    Limits,
    MemoryType,
    Module,
    Names,
)
from .opcodes import IMMEDIATE, Imm, Op
from .validate import validate

WASI_MODULE = "wasi_snapshot_preview1"
RUNTIME_PREFIX = "__imported_wasi_snapshot_preview1_"  # the runtime's C names for the WASI functions
MEMORY_SIZE_EXPORT = "capsule_program_memory_size"
MEMORY_GROW_EXPORT = "capsule_program_memory_grow"
WASM_PAGE = 65536
MAX_PAGES = 0xF000_0000 // WASM_PAGE  # capsule.compiler.abi.MAX_MEMORY_PAGES: the window above is the runtime's
RUNTIME_HEAP_PAGES = 1024  # 64 MiB the runtime may grow beyond a program's declared maximum memory
SHARED_IMPORT_MODULES = ("capsule",)  # intrinsics the program may import itself, like the runtime does


class LinkError(WasmError):
    """The program cannot be merged with the runtime (an import the runtime does not serve, ...)."""


@dataclass
class _Renumber:
    """Where one input module's indices land in the merged module."""

    funcs: list[int] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    tables: list[int] = field(default_factory=list)
    globals: list[int] = field(default_factory=list)
    elems: list[int] = field(default_factory=list)
    datas: list[int] = field(default_factory=list)
    memory_calls: tuple[int, int] | None = None  # (size, grow) functions replacing memory.size/grow


def runtime_base(program: Module) -> int:
    """The address the runtime must be linked at for ``program``: the end of its initial memory (at least one
    page, so no runtime object sits at address 0). Raises LinkError for a memory capsule cannot share."""
    mem = _program_memory(program)
    return max(mem.limits.min if mem is not None else 0, 1) * WASM_PAGE


def _program_memory(program: Module) -> MemoryType | None:
    for imp in program.imports:
        if imp.kind == ExternKind.MEMORY:
            raise LinkError(f"the program imports its memory ({imp.module}.{imp.name}): capsule can only link its "
                            "WASI runtime into a module that defines its own memory")
    if len(program.memories) > 1:
        raise LinkError("the program defines several memories")
    return program.memories[0] if program.memories else None


def _lowest_data(m: Module) -> int | None:
    """The lowest address an active data segment of ``m`` initializes (constant offsets only)."""
    offsets = [d.offset_expr[0].imm_as(int) for d in m.datas
               if d.offset_expr is not None and d.offset_expr[0].op == Op.I32_CONST]
    return min((o & 0xFFFF_FFFF for o in offsets), default=None)


def _func_type(m: Module, index: int) -> FuncType:
    return m.func_type(index)


def _exports(m: Module, kind: ExternKind) -> dict[str, int]:
    return {e.name: e.index for e in m.exports if e.kind == kind}


def link(program: Module, runtime: Module, *, max_pages: int | None = None) -> Module:
    """Merge ``program`` (imports wasi_snapshot_preview1) with ``runtime`` (linked at ``runtime_base(program)``,
    importing its memory). ``max_pages`` caps the merged memory (default: the program's own maximum, if any,
    plus the runtime's pages; at most what capsule's window allows). Neither input is modified."""
    pmem = _program_memory(program)
    rmem = [imp for imp in runtime.imports if imp.kind == ExternKind.MEMORY]
    if len(rmem) != 1 or runtime.memories:
        raise LinkError("the runtime module must import exactly one memory and define none")
    rmin = rmem[0].desc_as(MemoryType).limits.min
    base = runtime_base(program)
    low = _lowest_data(runtime)
    if low is not None and low < base:
        raise LinkError(f"the runtime was linked at {low:#x}, inside the program's initial memory ({base:#x} bytes): "
                        f"link it at runtime_base(program)")
    for kind, what in ((ExternKind.TABLE, "table"), (ExternKind.GLOBAL, "global")):
        for m, who in ((program, "the program"), (runtime, "the runtime")):
            imp = next((i for i in m.imports if i.kind == kind), None)
            if imp is not None:
                raise LinkError(f"{who} imports a {what} ({imp.module}.{imp.name}), which nothing can supply")
    if program.start is not None and runtime.start is not None:
        raise LinkError("both the program and the runtime have a start function")

    rexports = _exports(runtime, ExternKind.FUNC)
    # -- function imports: what stays an import, what binds to the runtime ------------------------------------
    imports: list[Import] = []
    import_at: dict[tuple[str, str], int] = {}
    types: list[FuncType] = list(program.types) + list(runtime.types)
    ntypes = len(program.types)

    def keep_import(imp: Import, type_index: int) -> int:
        key = (imp.module, imp.name)
        if key in import_at:
            have = types[imports[import_at[key]].desc_as(int)]
            if have != types[type_index]:
                raise LinkError(f"{imp.module}.{imp.name} is imported with two types: {have} and {types[type_index]}")
            return import_at[key]
        import_at[key] = len(imports)
        imports.append(Import(imp.module, imp.name, ExternKind.FUNC, type_index))
        return import_at[key]

    p_funcs: list[int | tuple[str, int]] = []  # an import index now, or ("rt", runtime func index) to resolve
    for imp in program.imports:
        if imp.kind != ExternKind.FUNC:
            continue
        if imp.module == WASI_MODULE:
            target = rexports.get(RUNTIME_PREFIX + imp.name)
            if target is None:
                raise LinkError(f"the program imports {imp.module}.{imp.name}, which capsule's WASI runtime does "
                                "not serve")
            want, have = program.types[imp.desc_as(int)], _func_type(runtime, target)
            if want != have:
                raise LinkError(f"the program imports {imp.module}.{imp.name} as {want}, but capsule's WASI "
                                f"runtime serves it as {have}")
            p_funcs.append(("rt", target))
        elif imp.module in SHARED_IMPORT_MODULES:
            p_funcs.append(keep_import(imp, imp.desc_as(int)))
        else:
            raise LinkError(f"the program imports {imp.module}.{imp.name}, which capsule's WASI runtime does not "
                            f"serve (it serves {WASI_MODULE}; programs may also import capsule.*)")
    r_import_funcs = [keep_import(imp, ntypes + imp.desc_as(int)) for imp in runtime.imports
                      if imp.kind == ExternKind.FUNC]
    nimp = len(imports)
    p_base = nimp
    r_base = nimp + len(program.funcs)
    rmap = _Renumber(
        funcs=r_import_funcs + [r_base + i for i in range(len(runtime.funcs))],
        types=[ntypes + t for t in range(len(runtime.types))],
        tables=[len(program.tables) + t for t in range(len(runtime.tables))],
        globals=[len(program.globals) + g for g in range(len(runtime.globals))],
        elems=[len(program.elems) + e for e in range(len(runtime.elems))],
        datas=[len(program.datas) + d for d in range(len(runtime.datas))],
    )
    pmap = _Renumber(
        funcs=[rmap.funcs[f[1]] if isinstance(f, tuple) else f for f in p_funcs]
        + [p_base + i for i in range(len(program.funcs))],
        types=list(range(ntypes)),
        tables=list(range(len(program.tables))),
        globals=list(range(len(program.globals))),
        elems=list(range(len(program.elems))),
        datas=list(range(len(program.datas))),
    )
    size_fn, grow_fn = rexports.get(MEMORY_SIZE_EXPORT), rexports.get(MEMORY_GROW_EXPORT)
    if size_fn is None or grow_fn is None:
        raise LinkError(f"the runtime does not export {MEMORY_SIZE_EXPORT}/{MEMORY_GROW_EXPORT}")
    pmap.memory_calls = (rmap.funcs[size_fn], rmap.funcs[grow_fn])

    out = Module()
    out.types = types
    out.imports = imports
    out.funcs = [_function(f, pmap) for f in program.funcs] + [_function(f, rmap) for f in runtime.funcs]
    out.tables = list(program.tables) + list(runtime.tables)
    out.memories = [MemoryType(_limits(pmem, rmin, base, max_pages))]
    out.globals = [_global(g, pmap) for g in program.globals] + [_global(g, rmap) for g in runtime.globals]
    out.elems = [_elem(e, pmap) for e in program.elems] + [_elem(e, rmap) for e in runtime.elems]
    out.datas = [_data(d) for d in program.datas] + [_data(d) for d in runtime.datas]
    if program.data_count is not None or runtime.data_count is not None:
        out.data_count = len(out.datas)
    if program.start is not None:
        out.start = pmap.funcs[program.start]
    elif runtime.start is not None:
        out.start = rmap.funcs[runtime.start]
    out.exports = _merge_exports(program, runtime, pmap, rmap)
    out.names = _merge_names(program, runtime, pmap, rmap)
    return out


def _limits(pmem: MemoryType | None, rmin: int, base: int, max_pages: int | None) -> Limits:
    lo = max(rmin, base // WASM_PAGE)
    if max_pages is None:
        pmax = pmem.limits.max if pmem is not None else None
        # a program's own maximum, plus the runtime's pages and room for its heap (files, argument blobs)
        max_pages = MAX_PAGES if pmax is None else pmax + (lo - base // WASM_PAGE) + RUNTIME_HEAP_PAGES
    hi = min(max(max_pages, lo), MAX_PAGES)
    if lo > hi:
        raise LinkError(f"the program and the runtime need {lo} pages of memory, more than capsule's {MAX_PAGES}")
    return Limits(lo, hi)


def _merge_exports(program: Module, runtime: Module, pmap: _Renumber, rmap: _Renumber) -> list[Export]:
    out: list[Export] = []
    for e in program.exports:
        out.append(Export(e.name, e.kind, _export_index(e, pmap)))
    taken = {e.name for e in out}
    for e in runtime.exports:
        if e.name.startswith(RUNTIME_PREFIX) or e.name in (MEMORY_SIZE_EXPORT, MEMORY_GROW_EXPORT):
            continue  # bound to the program's imports and memory instructions, not part of the host protocol
        if e.name in taken:
            raise LinkError(f"the program exports {e.name!r}, a name capsule's WASI runtime exports to the host")
        out.append(Export(e.name, e.kind, _export_index(e, rmap)))
        taken.add(e.name)
    if "memory" not in taken:  # the host reads and writes guest memory through this export
        out.append(Export("memory", ExternKind.MEMORY, 0))
    return out


def _export_index(e: Export, r: _Renumber) -> int:
    if e.kind == ExternKind.FUNC:
        return r.funcs[e.index]
    if e.kind == ExternKind.TABLE:
        return r.tables[e.index]
    if e.kind == ExternKind.GLOBAL:
        return r.globals[e.index]
    return 0  # the one memory


def _merge_names(program: Module, runtime: Module, pmap: _Renumber, rmap: _Renumber) -> Names:
    """Keep both sides' function and local names (for backtraces); the runtime's globals are prefixed, so the
    program's ``__stack_pointer`` stays the one the compiler keeps per fiber."""
    names = Names(module=program.names.module)
    # the runtime's first: a program import bound to a runtime function takes the runtime function's name
    for m, r, prefix in ((runtime, rmap, "capsule_runtime."), (program, pmap, "")):
        nimp = m.num_imported_funcs
        for f, n in m.names.funcs.items():
            if f < len(r.funcs):
                names.funcs.setdefault(r.funcs[f], n)
        for f, locs in m.names.locals.items():
            if nimp <= f < len(r.funcs):
                names.locals[r.funcs[f]] = dict(locs)
        for g, n in m.names.globals.items():
            if g < len(r.globals):
                names.globals[r.globals[g]] = prefix + n
    return names


# -- instruction renumbering ---------------------------------------------------------------------------------
def _instr(ins: Instr, r: _Renumber) -> Instr:
    op, imm = ins.op, ins.imm
    if r.memory_calls is not None and op in (Op.MEMORY_SIZE, Op.MEMORY_GROW):
        return Instr(Op.CALL, r.memory_calls[0 if op == Op.MEMORY_SIZE else 1], ins.offset)
    kind = IMMEDIATE[op]
    if kind is Imm.FUNC:
        imm = r.funcs[ins.imm_as(int)]
    elif kind is Imm.GLOBAL:
        imm = r.globals[ins.imm_as(int)]
    elif kind is Imm.TABLE:
        imm = r.tables[ins.imm_as(int)]
    elif kind is Imm.CALL_INDIRECT:
        t, tab = ins.imm_pair()
        imm = (r.types[t], r.tables[tab])
    elif kind is Imm.ELEM:
        imm = r.elems[ins.imm_as(int)]
    elif kind is Imm.ELEM_TABLE:
        e, tab = ins.imm_pair()
        imm = (r.elems[e], r.tables[tab])
    elif kind is Imm.TABLE_TABLE:
        a, b = ins.imm_pair()
        imm = (r.tables[a], r.tables[b])
    elif kind is Imm.DATA:
        imm = r.datas[ins.imm_as(int)]
    elif kind is Imm.DATA_MEMORY:
        d, mem = ins.imm_pair()
        imm = (r.datas[d], mem)
    elif kind is Imm.BLOCK:
        block = ins.imm_as(BlockType)
        if block.type_index is not None:
            imm = BlockType(type_index=r.types[block.type_index])
    return Instr(op, imm, ins.offset, ins.end, ins.else_)


def _body(body: list[Instr], r: _Renumber) -> list[Instr]:
    return [_instr(i, r) for i in body]


def _const(body: list[Instr], r: _Renumber) -> list[Instr]:
    """A constant expression: no memory instructions to redirect, only global.get/ref.func to renumber."""
    plain = _Renumber(r.funcs, r.types, r.tables, r.globals, r.elems, r.datas, None)
    return _body(body, plain)


def _function(f: Function, r: _Renumber) -> Function:
    return Function(r.types[f.type_index], f.locals, f.num_params, _body(f.body, r), f.offset, f.size)


def _global(g: Global, r: _Renumber) -> Global:
    return Global(g.type, _const(g.init, r), g.offset)


def _elem(e: Elem, r: _Renumber) -> Elem:
    return Elem(e.mode, e.type, [_const(item, r) for item in e.items], r.tables[e.table] if r.tables else e.table,
                None if e.offset_expr is None else _const(e.offset_expr, r), e.offset)


def _data(d: Data) -> Data:
    return copy.copy(d)


def link_program(program: Module, runtime: Module, *, max_pages: int | None = None) -> Module:
    """``link`` and validate the result (a failure there is a bug in the merge, reported as such)."""
    merged = link(program, runtime, max_pages=max_pages)
    try:
        validate(merged)
    except WasmError as e:
        raise LinkError(f"the merged module does not validate: {e}") from e
    return merged
