"""A whole module to one BPF object: lower every function, pack them into physical functions, add the
dispatcher, and describe everything the host needs in ``.capsule.meta``.

Which physical function each wasm function goes into is planned before lowering, from estimated sizes and the
call graph (``packing``), so that lowering knows which calls stay inside one physical function; physical
functions of similar size stay under the verifier's per-function limits. A region's id is its index inside its
physical function, shifted left by 8, or'ed with the physical function's number.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capsule.bpf.asm import AsmError
from capsule.bpf.btf import BTF
from capsule.bpf.insn import slot_offsets
from capsule.bpf.spec import FuncInfo, MapSpec, ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapType, ProgType
from capsule.guest.softfloat import TRAP_CHECKS, WASM_OPS, add_to_btf, library
from capsule.wasm import ExternKind, FuncType, Instr, Module, Op, SegmentMode, UnsupportedError, op_name

from . import abi, hook_abi, hooks, meta, packing
from .calls import direct_entry, direct_entry_insns, leaf_stub, return_label, return_stub
from .code import Code, RegionKey
from .dispatcher import BOUNDED_FUNCS, Layout, entry_program, leaf_name, phys_name, phys_prologue
from .floats import LIB_PREFIX
from .function import SPLIT_BRANCHES
from .inline import inline_small_functions
from .lower_all import lower_functions
from .options import Options
from .state import CompileError, LoweredFunction, ModuleInfo
from .window import ARENA, DEFAULT_MEMORY_PIECE, Window


def compile_module(module: Module, options: Options | None = None) -> ObjectSpec:
    """Compile a validated module. Raises ``UnsupportedError`` (naming function and offset) for what capsule
    cannot lower yet."""
    opt = options or Options()
    _check_module(module)
    inlined: dict[int, list[tuple[int, int, int]]] = {}
    if opt.inline:
        module, inlined = inline_small_functions(module)
    types = _canonical_types(module)
    info = ModuleInfo(
        module=module,
        options=opt,
        type_ids=types,
        frame_margin=abi.FRAME_LOCALS + abi.SLOT * max([len(t.params) for t in module.types] + [0]),
        stack_pointer_global=next((g for g, n in module.names.globals.items() if n == "__stack_pointer"), None),
        imported_funcs=module.num_imported_funcs,
        inlined=inlined,
    )
    info.window = build_window(module, opt)
    if not opt.checked:
        info.memory_mask = abi.fast_mask(max_memory_pages(module, opt) * abi.WASM_PAGE)
    info.leaves = choose_leaves(module)
    per_program = MAX_SUBPROGRAMS - 1 - len(BOUNDED_FUNCS) - len(info.leaves) - len(library_needed(module))
    try:
        plan = info.plan = packing.plan(module, info.leaves, opt.phys_target, per_program,
                                        MAX_NEST if opt.may_goto else MAX_NEST_BOUNDED, opt.program_budget)
    except ValueError as e:
        raise UnsupportedError(str(e)) from None
    sites = packing.call_sites(module)
    info.direct_callees = frozenset(b for a, b in sites if info.direct(a, b))
    info.direct_returners = direct_returners(sites, info)
    direct_edges: dict[int, set[int]] = {}
    for a, b in sites:
        if info.direct(a, b):
            direct_edges.setdefault(a, set()).add(b)
            direct_edges.setdefault(b, set())
    info.direct_recursive = packing.on_cycles(direct_edges)
    defined = range(module.num_imported_funcs, module.num_imported_funcs + len(module.funcs))
    lowered = lower_functions(info, list(defined))  # from the cache, on every core (``lower_all``)
    returning = _drop_unused_direct_entries(lowered, info.window)
    leaf_code = [f for f in lowered if f.index in info.leaves]
    # a leaf's entry region (used by the host and call_indirect) is a stub in a physical function that calls it
    regional = [leaf_stub(f) if f.index in info.leaves else f for f in lowered]
    phys: list[list[LoweredFunction]] = [[] for _ in range(plan.nphys)]
    for f in regional:
        phys[plan.phys_of[f.index]].append(f)
    region_ids = packing.region_ids([[f.regions for f in funcs] for funcs in phys])

    phys_code = [_physical_function(p, funcs, region_ids, returning, info.direct_recursive, info.window)
                 for p, funcs in enumerate(phys)]
    leaf_codes = {leaf_name(f.index): f for f in leaf_code}
    library = _library_functions(info.library_used, opt.cpu)
    nparts = len(plan.programs)
    split = nparts > 1
    btf = BTF()
    protos = _Protos(btf)
    programs: dict[str, ProgramSpec] = {}
    ranges: list[list[tuple[int, int]]] = []
    if opt.hook is not None:
        library[hooks.EMIT_FUNC] = hooks.emit_function()
    for k in range(nparts):
        owners = [(r, j) for j, r in enumerate(plan.programs) if j != k] if split else []
        layout = Layout(k, plan.local(k), owners)
        ps, code_ranges = _program(layout, phys_code, leaf_codes, library, region_ids, opt, protos, module,
                                   info.window)
        programs[ps.name] = ps
        ranges.append(code_ranges)
    extra: dict[str, bytes] = {}
    if opt.hook is not None:  # the hook's entry, with the same physical functions as the run entry
        handler = hooks.handler_index(module)
        layout = Layout(0, plan.local(0), [(r, j) for j, r in enumerate(plan.programs) if j != 0] if split else [])
        entry = hooks.entry(opt.hook, layout, opt, regional[handler - module.num_imported_funcs].regions[0])
        ps, _ = _program(layout, phys_code, leaf_codes, library, region_ids, opt, protos, module, info.window,
                         entry=entry)
        programs[ps.name] = ps
        extra[hook_abi.HOOK_SECTION] = hooks.describe(opt, handler, module)
    description, data = describe(module, opt, types, lowered, region_ids, info, ranges[0])
    if split:
        description = replace(description, shared=plan.shared, parts=tuple(
            meta.Part((r.start, r.stop), tuple(c)) for r, c in zip(plan.programs, ranges, strict=True)))
    maps = info.window.maps()
    if split:
        maps[abi.PROGRAMS_MAP] = MapSpec(abi.PROGRAMS_MAP, MapType.PROG_ARRAY, 4, 4, nparts)
    if opt.hook is not None:
        maps.update(hooks.maps(opt))
    return ObjectSpec(
        programs=programs,
        maps=maps,
        btf=btf,
        license="GPL",
        extra_sections={abi.META_SECTION: description.to_json(), abi.DATA_SECTION: data, **extra},
    )


@dataclass
class _PhysCode:
    """A physical function's code, and where its wasm functions start in it (index, function)."""

    code: Code
    starts: list[tuple[int, int]]


def _physical_function(p: int, funcs: list[LoweredFunction], region_ids: dict[RegionKey, int],
                       returning: set[int], recursive: frozenset[int], win: Window) -> _PhysCode:
    pc = Code()
    labels = [k.label for f in funcs for k in f.regions]
    phys_prologue(pc, p, labels, win)
    starts = []
    for f in funcs:
        starts.append((len(pc), f.index))
        pc.append(f.code)
    for f in funcs:
        if f.index in returning:
            conts = [(region_ids[cont], direct_entry(cont)) for g in funcs for callee, cont in g.direct_calls
                     if callee == f.index]
            pc.append(return_stub(f.index, conts, bounded=f.index in recursive))
    return _PhysCode(pc, starts)


class _Protos:
    """The object's BTF function types: one per function name, shared by the programs that hold a copy."""

    def __init__(self, btf: BTF) -> None:
        self.btf = btf
        u64 = btf.int_id(8)
        i32 = btf.int_id(4, signed=True)
        self.main = btf.add_func_proto(i32, [("ctx", btf.add_ptr(0))])
        self.phys = btf.add_func_proto(u64, [("state", u64), ("fiber", u64)])
        self.ids: dict[str, int] = {}

    def func(self, name: str, *, main: bool = False) -> int:
        if name not in self.ids:
            if name == hooks.EMIT_FUNC:
                self.ids[name] = hooks.emit_btf(self.btf)
            elif name.startswith(LIB_PREFIX):
                self.ids[name] = add_to_btf(self.btf, library()[name.removeprefix(LIB_PREFIX)])
            else:
                self.ids[name] = self.btf.add_func(name, self.main if main else self.phys)
        return self.ids[name]


def _program(layout: Layout, phys: list[_PhysCode], leaves: dict[str, LoweredFunction], library: dict[str, Code],
             region_ids: dict[RegionKey, int], opt: Options, protos: _Protos, module: Module,
             win: Window, entry: Code | None = None) -> tuple[ProgramSpec, list[tuple[int, int]]]:
    """Program ``layout.k``: its entry and dispatcher (or the hook's ``entry``), its physical functions, and
    the leaves and soft-float functions their code calls; with (first slot, wasm function) of every
    function's code in it."""
    total = Code()
    total.append(entry if entry is not None else entry_program(layout, opt.fibers, opt.may_goto, win))
    starts = [phys_name(p) for p in layout.local]
    func_starts: list[tuple[int, int]] = []  # (instruction index, wasm function), for verifier diagnostics
    for p in layout.local:
        base = len(total)
        func_starts += [(base + at, f) for at, f in phys[p].starts]
        total.append(phys[p].code)
    for name in _called(total, leaves, library):
        starts.append(name)
        if name in leaves:
            func_starts.append((len(total), leaves[name].index))
            total.append(leaves[name].code)
        else:
            total.append(library[name.removeprefix(LIB_PREFIX)])
    try:
        insns = total.assemble(region_ids)
    except AsmError as e:
        raise _in_function(e, func_starts, module) from None
    slots = slot_offsets(insns)
    name = abi.program_name(layout.k) if entry is None else hook_abi.HOOK_PROGRAM
    if slots[-1] + insns[-1].slots() > MAX_PROGRAM_INSNS:
        # the physical functions are as small as the plan makes them: what is left is one function's code
        sizes = sorted(((b - a, f) for (a, f), (b, _) in zip(func_starts, func_starts[1:] + [(len(total), -1)],
                                                              strict=True)), reverse=True)
        big = sizes[0][1] if sizes else None
        fname = (module.func_name(big) or f"func{big}") if big is not None else "the dispatcher"
        raise CompileError(f"{slots[-1] + insns[-1].slots():,} BPF instructions in one program, more than the "
                           f"kernel's {MAX_PROGRAM_INSNS:,}: function {fname} alone is {sizes[0][0]:,}",
                           func=big, func_name=fname)
    func_infos = [FuncInfo(0, protos.func(name, main=True))]
    if not opt.may_goto:
        starts = [*BOUNDED_FUNCS, *starts]
    for fn in starts:
        func_infos.append(FuncInfo(slots[total.position(total.labels[fn])], protos.func(fn)))
    section, ptype, flags, attach = ("tc", ProgType.SCHED_CLS, 0, 0) if entry is None else \
        hooks.PROGRAM_TYPES[opt.hook or ""]
    ps = ProgramSpec(name, section, ptype, insns, func_infos=func_infos, flags=flags, expected_attach_type=attach)
    return ps, [(slots[total.position(i)], f) for i, f in func_starts]


def _called(code: Code, leaves: dict[str, LoweredFunction], library: dict[str, Code]) -> list[str]:
    """The leaves, soft-float functions and ``capsule_emit`` that ``code`` calls, and those they call, in a
    stable order."""
    want: list[str] = []
    seen: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        for ins in c.insns:
            ref = ins.ref
            if ref is None or ref in seen or not ins.is_call:
                continue
            if ref in leaves:
                seen.add(ref)
                want.append(ref)
                todo.append(leaves[ref].code)
            elif (ref.startswith(LIB_PREFIX) and ref.removeprefix(LIB_PREFIX) in library) or \
                    (ref == hooks.EMIT_FUNC and ref in library):
                seen.add(ref)
                want.append(ref)
    return sorted(want, key=lambda n: (n.startswith(LIB_PREFIX), n))


def direct_returners(sites: dict[tuple[int, int], int], info: ModuleInfo) -> frozenset[int]:
    """Directly called functions that also return straight to their callers: those with at most one direct
    call site outside themselves. A return that may jump to the continuations of two call sites lets the
    verifier walk paths from one call's return to the other's continuation and on to the first call again,
    a cycle that no program takes but that keeps its states from pruning (measured on Lua: 635k processed
    instructions became 873k); the calls a function makes to itself are real recursion, bounded by may_goto."""
    outside: dict[int, int] = {}
    for (a, b), n in sites.items():
        if a != b and info.direct(a, b):
            outside[b] = outside.get(b, 0) + n
    return frozenset(b for b in info.direct_callees if outside.get(b, 0) <= 1)


def _in_function(e: AsmError, starts: list[tuple[int, int]], m: Module) -> CompileError:
    """The assembler's error, naming the wasm function whose code holds the instruction."""
    func = None
    for at, f in starts:
        if e.index is not None and at <= e.index:
            func = f
    name = (m.func_name(func) or f"func{func}") if func is not None else "the dispatcher"
    return CompileError(f"{e}", func=func, func_name=name)


def _returns_directly(f: LoweredFunction) -> bool:
    return any(ins.ref == return_label(f.index) for ins in f.code.insns)


def _drop_unused_direct_entries(lowered: list[LoweredFunction], win: Window) -> set[int]:
    """A callee that never returns (it loops forever, traps, exits) has no return stub to jump back to its
    direct callers, so their entries for it are unreachable: remove them. Returns the functions that return
    directly."""
    returning = {f.index for f in lowered if _returns_directly(f)}
    for f in lowered:
        kept = []
        for callee, cont in f.direct_calls:
            if callee in returning:
                kept.append((callee, cont))
            else:
                f.code.delete(direct_entry(cont), direct_entry_insns(win))
        f.direct_calls = kept
    return returning


def _library_functions(names: set[str], cpu: int) -> dict[str, Code]:
    """The soft-float functions the code calls, each a global function of its own (verified once), compiled
    for the build's instruction set."""
    if not names:
        return {}
    lib = library(f"v{cpu}")
    out = {}
    for name in sorted(names):
        code = Code()
        code.label(LIB_PREFIX + name)
        code.emit(*(replace(i) for i in lib[name].insns))
        out[name] = code
    return out


def _check_module(m: Module) -> None:
    if len(m.all_memories()) > 1:
        raise UnsupportedError("multiple memories")
    if len(m.all_tables()) > abi.MAX_TABLES:
        raise UnsupportedError(f"more than {abi.MAX_TABLES} tables")
    if len(m.all_globals()) > abi.MAX_GLOBALS:
        raise UnsupportedError(f"more than {abi.MAX_GLOBALS} globals")
    if m.num_imported_funcs + len(m.funcs) > abi.MAX_FUNCS:
        raise UnsupportedError(f"more than {abi.MAX_FUNCS} functions")
    for t in m.all_tables():
        if t.limits.min > abi.MAX_TABLE_ELEMS:
            raise UnsupportedError(f"a table of {t.limits.min} elements (at most {abi.MAX_TABLE_ELEMS})")
    for mem in m.all_memories():
        if mem.limits.min > abi.MAX_MEMORY_PAGES:
            raise UnsupportedError(f"a memory of {mem.limits.min} pages (at most {abi.MAX_MEMORY_PAGES})")


def max_memory_pages(m: Module, opt: Options) -> int:
    """How far the memory may grow: its declared maximum, within the window, and in fast mode within what the
    address mask keeps away from the runtime area (``abi.fast_mask``)."""
    mems = m.all_memories()
    if not mems:
        return 0
    lim = mems[0].limits
    pages = min(lim.max if lim.max is not None else abi.MAX_MEMORY_PAGES, abi.MAX_MEMORY_PAGES)
    if opt.window == "map":  # growth stays within the piece created at load
        pages = min(pages, build_window(m, opt).memory_piece // abi.WASM_PAGE)
    if not opt.checked:
        pages = min(pages, (abi.fast_mask(pages * abi.WASM_PAGE) + 1) // abi.WASM_PAGE)
        if lim.min > pages:
            raise UnsupportedError(f"a memory of {lim.min} pages in fast mode (at most {pages}: use checked mode)")
    return pages


def build_window(m: Module, opt: Options) -> Window:
    """The window the build uses: the arena, or map pieces sized for the memory's maximum (``window``)."""
    if opt.window == "arena":
        return ARENA
    mems = m.all_memories()
    lim = mems[0].limits if mems else None
    initial = lim.min * abi.WASM_PAGE if lim else 0
    if opt.window_piece:
        piece = opt.window_piece
    else:
        declared = lim.max * abi.WASM_PAGE if lim and lim.max is not None else DEFAULT_MEMORY_PIECE
        piece = max(initial, min(declared, DEFAULT_MEMORY_PIECE))
    if initial > piece:
        raise UnsupportedError(f"a memory of {lim.min if lim else 0} pages does not fit the map window's piece "
                               f"of {piece >> 10} KiB (window_piece)")
    try:
        return Window.map(opt.fibers, opt.stack_size, piece, [t.limits.max for t in m.all_tables()])
    except ValueError as e:
        raise UnsupportedError(str(e)) from None


def _canonical_types(m: Module) -> dict[FuncType, int]:
    ids: dict[FuncType, int] = {}
    for t in m.types:
        ids.setdefault(t, len(ids))
    return ids


# what keeps a function from being a leaf: it could suspend (loops, bulk memory) or needs the software stack
_NOT_LEAF = {Op.CALL, Op.CALL_INDIRECT, Op.LOOP, Op.MEMORY_GROW, Op.MEMORY_FILL, Op.MEMORY_COPY}
MAX_SUBPROGRAMS = 256  # the verifier's limit, main program included
MAX_PROGRAM_INSNS = 1_000_000  # the kernel's limit on a program's instructions (BPF_COMPLEXITY_LIMIT_INSNS)
# Physical functions one call may nest below the one the dispatcher calls (``packing.nesting``). The verifier
# allows 8 frames and 512 bytes of stack in a chain: the entry (16 bytes), the physical functions (80 each), a
# leaf (80) and a soft-float function (8) fit with three nested; the profile without may_goto spends two
# frames on its bounded dispatcher loops.
MAX_NEST = 3
MAX_NEST_BOUNDED = 1
MAX_LEAVES = 160  # of the verifier's 256 subprograms, the rest are for physical functions


def library_needed(m: Module) -> set[str]:
    """The soft-float functions the module's float instructions will call (``floats``)."""
    names: set[str] = set()
    for f in m.funcs:
        for name in {op_name(ins.op) for ins in f.body}:
            if name in WASM_OPS:
                names.add(WASM_OPS[name])
            if name in TRAP_CHECKS:
                names.add(TRAP_CHECKS[name])
    return names


def choose_leaves(m: Module) -> frozenset[int]:
    """Functions compiled as plain BPF functions: no calls, no loops, nothing that suspends, and not too long.
    When there are more than fit, the most-called win."""
    calls: dict[int, int] = {}
    for f in m.funcs:
        for ins in f.body:
            if ins.op == Op.CALL:
                assert isinstance(ins.imm, int)
                calls[ins.imm] = calls.get(ins.imm, 0) + 1
    n = m.num_imported_funcs
    # a leaf is one BPF function, one path for the verifier: one too long to cut into regions
    # (``function.SPLIT_BRANCHES``; every wasm instruction lowers to at most about one conditional jump)
    cands = [n + k for k, f in enumerate(m.funcs)
             if len(f.body) <= SPLIT_BRANCHES and not any(ins.op in _NOT_LEAF for ins in f.body)]
    cands.sort(key=lambda i: -calls.get(i, 0))
    return frozenset(cands[:MAX_LEAVES])


def _const_expr(expr: list[Instr]) -> meta.ConstExpr:
    """A constant expression as the host evaluates it: (op, imm) pairs up to the ``end``."""
    out = []
    for ins in expr:
        if ins.op == Op.END:
            break
        out.append((int(ins.op), ins.imm if isinstance(ins.imm, int) else None))
    return tuple(out)


def describe(m: Module, opt: Options, types: dict[FuncType, int], lowered: list[LoweredFunction],
             region_ids: dict[RegionKey, int], info: ModuleInfo,
             code_ranges: list[tuple[int, int]]) -> tuple[meta.Meta, bytes]:
    """The metadata the host needs to instantiate and call the compiled module, and the data segment bytes."""
    entry = {f.index: region_ids[f.regions[0]] for f in lowered}
    signatures = [meta.Signature((), ())] * len(types)
    for t, i in types.items():
        signatures[i] = meta.Signature(t.params, t.results)
    funcs = [meta.Function(m.func_name(idx) or f"func{idx}", types[m.func_type(idx)], entry.get(idx))
             for idx in range(m.num_imported_funcs + len(m.funcs))]
    globals_ = []
    gimports = [x for x in m.imports if x.kind == ExternKind.GLOBAL]
    for g, gt in enumerate(m.all_globals()):
        if g < len(gimports):
            globals_.append(meta.Global(gt.type, gt.mutable, imported=(gimports[g].module, gimports[g].name)))
        else:
            globals_.append(meta.Global(gt.type, gt.mutable, init=_const_expr(m.globals[g - len(gimports)].init)))
    data = bytearray()
    segments = []
    for seg in m.datas:
        offset = None if seg.mode != SegmentMode.ACTIVE else _const_expr(seg.offset_expr or [])
        segments.append(meta.DataSegment(len(data), len(seg.init), offset))
        data += seg.init
    elems = []
    for el in m.elems:
        if el.mode != SegmentMode.ACTIVE:
            elems.append(meta.ElemSegment(None))
            continue
        items: list[int | meta.ConstExpr] = []
        for expr in el.items:
            first = expr[0]
            if first.op == Op.REF_FUNC:
                assert isinstance(first.imm, int)
                items.append(first.imm + 1)
            elif first.op == Op.REF_NULL:
                items.append(0)
            else:
                items.append(_const_expr(expr))
        elems.append(meta.ElemSegment(_const_expr(el.offset_expr or []), el.table, tuple(items)))
    mems = m.all_memories()
    memory = meta.Memory(mems[0].limits.min, max_memory_pages(m, opt)) if mems else None
    description = meta.Meta(
        options=meta.BuildOptions(opt.checked, opt.may_goto, opt.fibers, opt.stack_size),
        types=tuple(signatures),
        funcs=tuple(funcs),
        imported_funcs=m.num_imported_funcs,
        imports=tuple(meta.Import(x.module, x.name, x.kind) for x in m.imports),
        globals=tuple(globals_),
        stack_pointer_global=info.stack_pointer_global,
        memory=memory,
        tables=tuple(meta.Table(t.limits.min, t.limits.max) for t in m.all_tables()),
        data=tuple(segments),
        elems=tuple(elems),
        exports=tuple(meta.Export(e.name, e.kind, e.index) for e in m.exports),
        start=m.start,
        regions={rid: key.func for key, rid in region_ids.items()},
        frame_sizes={f.index: f.frame.size for f in lowered if f.frame is not None},
        code_ranges=tuple(code_ranges),
    )
    return description, bytes(data)


__all__ = ["compile_module"]
