"""A whole module to one BPF object: lower every function, pack them into physical functions, add the
dispatcher, and describe everything the host needs in ``.capsule.meta``.

Packing is greedy by size (largest wasm function first, into the physical function holding the least code),
which keeps physical functions of similar size under the verifier's per-function limits; a region's id is
its index inside its physical function, shifted left by 8, or'ed with the physical function's number.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from capsule.bpf.btf import BTF
from capsule.bpf.insn import slot_offsets
from capsule.bpf.spec import FuncInfo, MapSpec, ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapFlags, MapType, ProgFlags, ProgType
from capsule.wasm import ExternKind, FuncType, Instr, Module, Op, SegmentMode, UnsupportedError, ValType

from . import abi
from .code import Code, RegionKey
from .dispatcher import BOUNDED_FUNCS, entry_program, leaf_name, phys_name, phys_prologue
from .floats import LIB_PREFIX
from .function import CompileError, FunctionCompiler, LoweredFunction, ModuleInfo
from .inline import inline_small_functions
from .memory import ARENA_MAP
from .options import Options

META_SECTION = ".capsule.meta"
DATA_SECTION = ".capsule.data"
META_VERSION = 1


@dataclass
class Packing:
    phys: list[list[LoweredFunction]] = field(default_factory=list)
    region_ids: dict[RegionKey, int] = field(default_factory=dict)


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
    info.leaves = choose_leaves(module)
    lowered = [FunctionCompiler(info, module.num_imported_funcs + k, leaf=module.num_imported_funcs + k in info.leaves)
               .compile() for k in range(len(module.funcs))]
    leaf_code = [f for f in lowered if f.index in info.leaves]
    # a leaf's entry region (used by the host and call_indirect) is a stub in a physical function that calls it
    regional = [leaf_stub(f) if f.index in info.leaves else f for f in lowered]
    packing = pack(regional, opt, max_phys=MAX_SUBPROGRAMS - 1 - len(BOUNDED_FUNCS) - len(leaf_code)
                                        - len(info.library_used))

    total = Code()
    total.append(entry_program(len(packing.phys), opt.fibers, opt.may_goto))
    starts = [phys_name(p) for p in range(len(packing.phys))]
    func_starts: list[tuple[int, int]] = []  # (instruction index, wasm function), for verifier diagnostics
    for p, funcs in enumerate(packing.phys):
        pc = Code()
        labels = [FunctionCompiler.region_label(k) for f in funcs for k in f.regions]
        phys_prologue(pc, p, labels)
        for f in funcs:
            func_starts.append((len(total) + len(pc), f.index))
            pc.append(f.code)
        total.append(pc)
    for f in leaf_code:
        func_starts.append((len(total), f.index))
        starts.append(leaf_name(f.index))
        total.append(f.code)
    library = _library_functions(info.library_used)
    for name, code in library.items():
        starts.append(LIB_PREFIX + name)
        total.append(code)
    insns = total.assemble(packing.region_ids)

    btf = BTF()
    u64 = btf.int_id(8)
    i32 = btf.int_id(4, signed=True)
    main_proto = btf.add_func_proto(i32, [("ctx", btf.add_ptr(0))])
    phys_proto = btf.add_func_proto(u64, [("state", u64), ("fiber", u64)])
    slots = slot_offsets(insns)
    func_infos = [FuncInfo(0, btf.add_func("capsule_run", main_proto))]
    if not opt.may_goto:
        starts = [*BOUNDED_FUNCS, *starts]
    for name in starts:
        if name.startswith(LIB_PREFIX):
            from capsule.guest.softfloat import add_to_btf, library

            type_id = add_to_btf(btf, library()[name.removeprefix(LIB_PREFIX)])
        else:
            type_id = btf.add_func(name, phys_proto)
        func_infos.append(FuncInfo(slots[total.labels[name]], type_id))

    meta, data = describe(module, opt, types, lowered, packing, info)
    meta["code_ranges"] = [[slots[i], f] for i, f in func_starts]
    window = MapSpec(ARENA_MAP, MapType.ARENA, 0, 0, abi.GIB4 // abi.PAGE, flags=MapFlags.MMAPABLE)
    prog = ProgramSpec("capsule_run", "syscall", ProgType.SYSCALL, insns, flags=ProgFlags.SLEEPABLE,
                       func_infos=func_infos)
    return ObjectSpec(
        programs={"capsule_run": prog},
        maps={ARENA_MAP: window},
        btf=btf,
        license="GPL",
        extra_sections={META_SECTION: json.dumps(meta, separators=(",", ":")).encode(), DATA_SECTION: data},
    )


def _library_functions(names: set[str]) -> dict[str, Code]:
    """The soft-float functions the code calls, each a global function of its own (verified once)."""
    if not names:
        return {}
    from dataclasses import replace as copy

    from capsule.guest.softfloat import library

    lib = library()
    out = {}
    for name in sorted(names):
        code = Code()
        code.label(LIB_PREFIX + name)
        code.emit(*(copy(i) for i in lib[name].insns))
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


def _canonical_types(m: Module) -> dict[FuncType, int]:
    ids: dict[FuncType, int] = {}
    for t in m.types:
        ids.setdefault(t, len(ids))
    return ids


# what keeps a function from being a leaf: it could suspend (loops, bulk memory) or needs the software stack
_NOT_LEAF = {Op.CALL, Op.CALL_INDIRECT, Op.LOOP, Op.MEMORY_GROW, Op.MEMORY_FILL, Op.MEMORY_COPY}
MAX_SUBPROGRAMS = 256  # the verifier's limit, main program included
MAX_LEAVES = 160  # of the verifier's 256 subprograms, the rest are for physical functions


def choose_leaves(m: Module) -> frozenset[int]:
    """Functions compiled as plain BPF functions: no calls, no loops, nothing that suspends. When there are
    more than fit, the most-called win."""
    calls: dict[int, int] = {}
    for f in m.funcs:
        for ins in f.body:
            if ins.op == Op.CALL:
                calls[ins.imm] = calls.get(ins.imm, 0) + 1  # type: ignore[index]
    n = m.num_imported_funcs
    cands = [n + k for k, f in enumerate(m.funcs) if not any(ins.op in _NOT_LEAF for ins in f.body)]
    cands.sort(key=lambda i: -calls.get(i, 0))
    return frozenset(cands[:MAX_LEAVES])


def leaf_stub(f: LoweredFunction) -> LoweredFunction:
    """The entry region of a leaf: call it, then return to our caller like any function (or pass on a trap)."""
    from capsule.bpf.asm import R0, R1, R2, alu, call, exit_, jmp, ldx
    from capsule.bpf.opcodes import Alu, Jmp

    from .values import BPF_FIBER_SCALAR, BPF_FP_SCALAR, FRAME, T0, T1
    from .values import FP as R10

    code = Code()
    code.label(FunctionCompiler.region_label(f.regions[0]))
    code.emit(ldx(8, R1, R10, BPF_FP_SCALAR), ldx(8, R2, R10, BPF_FIBER_SCALAR), call(leaf_name(f.index)),
              jmp(Jmp.JEQ, R0, 0, 1), exit_(),
              ldx(4, T1, FRAME, abi.FRAME_CALLER), alu(Alu.LSH, T1, 32), ldx(4, T0, FRAME, abi.FRAME_RETURN),
              alu(Alu.OR, T0, T1), exit_())
    return LoweredFunction(f.index, code, f.regions[:1], f.frame)


def pack(lowered: list[LoweredFunction], opt: Options, max_phys: int = abi.MAX_PHYS) -> Packing:
    total = sum(len(f.code) for f in lowered) or 1
    n = max(1, min(max_phys, abi.MAX_PHYS, math.ceil(total / opt.phys_target), len(lowered)))
    bins: list[list[LoweredFunction]] = [[] for _ in range(n)]
    sizes = [0] * n
    for f in sorted(lowered, key=lambda f: -len(f.code)):
        p = sizes.index(min(sizes))
        bins[p].append(f)
        sizes[p] += len(f.code)
    bins = [b for b in bins if b]
    packing = Packing(bins)
    for p, funcs in enumerate(bins):
        q = 0
        for f in funcs:
            for key in f.regions:
                packing.region_ids[key] = (q << abi.PHYS_BITS) | p
                q += 1
    return packing


def _const_expr(expr: list[Instr]) -> list:
    """A constant expression as JSON: a list of [op, imm] evaluated by the host (``runtime.instance``)."""
    out = []
    for ins in expr:
        if ins.op == Op.END:
            break
        out.append([int(ins.op), ins.imm if isinstance(ins.imm, int) else None])
    return out


def describe(m: Module, opt: Options, types: dict[FuncType, int], lowered: list[LoweredFunction],
             packing: Packing, info: ModuleInfo) -> tuple[dict, bytes]:
    """The metadata the host needs to instantiate and call the compiled module, and the data segment bytes."""
    entry = {f.index: packing.region_ids[f.regions[0]] for f in lowered}
    type_list = [None] * len(types)
    for t, i in types.items():
        type_list[i] = [[str(v) for v in t.params], [str(v) for v in t.results]]
    imports = [x for x in m.imports]
    funcs = []
    for idx in range(m.num_imported_funcs + len(m.funcs)):
        funcs.append({"name": m.func_name(idx) or f"func{idx}", "type": types[m.func_type(idx)],
                      "entry": entry.get(idx)})
    globals_ = []
    gimports = [x for x in imports if x.kind == ExternKind.GLOBAL]
    for g, gt in enumerate(m.all_globals()):
        item: dict = {"type": str(gt.type), "mutable": gt.mutable}
        if g < len(gimports):
            item["import"] = [gimports[g].module, gimports[g].name]
        else:
            item["init"] = _const_expr(m.globals[g - len(gimports)].init)
        globals_.append(item)
    data = bytearray()
    segments = []
    for seg in m.datas:
        if seg.mode != SegmentMode.ACTIVE:
            segments.append({"passive": True, "at": len(data), "size": len(seg.init)})
        else:
            segments.append({"offset": _const_expr(seg.offset_expr or []), "at": len(data), "size": len(seg.init)})
        data += seg.init
    elems = []
    for el in m.elems:
        if el.mode != SegmentMode.ACTIVE:
            elems.append({"passive": True})
            continue
        items = []
        for expr in el.items:
            first = expr[0]
            if first.op == Op.REF_FUNC:
                items.append(first.imm + 1)  # type: ignore[operator]
            elif first.op == Op.REF_NULL:
                items.append(0)
            else:
                items.append(_const_expr(expr))
        elems.append({"table": el.table, "offset": _const_expr(el.offset_expr or []), "items": items})
    mems = m.all_memories()
    memory = None
    if mems:
        lim = mems[0].limits
        memory = {"initial": lim.min, "max": min(lim.max if lim.max is not None else abi.MAX_MEMORY_PAGES,
                                                 abi.MAX_MEMORY_PAGES)}
    regions = {str(rid): key.func for key, rid in packing.region_ids.items()}
    meta = {
        "version": META_VERSION,
        "options": {"checked": opt.checked, "may_goto": opt.may_goto, "fibers": opt.fibers,
                    "stack_size": opt.stack_size},
        "types": type_list,
        "funcs": funcs,
        "imported_funcs": m.num_imported_funcs,
        "imports": [[x.module, x.name, int(x.kind)] for x in imports],
        "globals": globals_,
        "stack_pointer_global": info.stack_pointer_global,
        "memory": memory,
        "tables": [{"initial": t.limits.min, "max": t.limits.max} for t in m.all_tables()],
        "data": segments,
        "elems": elems,
        "exports": [{"name": e.name, "kind": int(e.kind), "index": e.index} for e in m.exports],
        "start": m.start,
        "regions": regions,
        "frame_sizes": {str(f.index): f.frame.size for f in lowered if f.frame is not None},
    }
    return meta, bytes(data)


__all__ = ["CompileError", "compile_module", "META_SECTION", "DATA_SECTION", "ValType"]
