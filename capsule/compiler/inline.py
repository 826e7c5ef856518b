"""Inlining small callees, as a module-to-module rewrite before lowering.

A call costs a frame on the software stack and a trip through the dispatcher (or at least a region boundary,
where the caller's operand stack is saved and reloaded). For a callee of a few instructions that is most of
the work, so the call is replaced by the callee's body::

    call $f            block (type of $f)          ;; the arguments are the block's parameters
                         local.set $p_last .. $p_0  ;; into fresh locals of the caller
                         (zero the callee's own locals)
                         ...body of $f...           ;; locals renumbered; `return` becomes `br` to this block
                       end

Because the wrapper block takes the place of the callee's function body, a branch to the callee's outermost
label already lands on the right block. Only callees without calls are inlined (so recursion never is), and
only small ones (``INLINE_MAX`` instructions), so code grows little. Backtraces show the caller for a trap
inside an inlined body.
"""

from __future__ import annotations

from dataclasses import replace

from capsule.wasm import BlockType, Function, Instr, Module, Op, ValType

INLINE_MAX = 16  # instructions in the callee's body, its final `end` excluded
_NO_INLINE = {Op.CALL, Op.CALL_INDIRECT}
_ZERO = {ValType.I32: Op.I32_CONST, ValType.I64: Op.I64_CONST, ValType.F32: Op.F32_CONST,
         ValType.F64: Op.F64_CONST}


Origins = dict[int, list[tuple[int, int, int]]]


def inline_small_functions(m: Module, limit: int = INLINE_MAX) -> tuple[Module, Origins]:
    """A copy of ``m`` with calls to small call-free functions replaced by their bodies, and for each changed
    function the body ranges ``(first, end, callee)`` that came from a callee (traps there name the callee)."""
    n = m.num_imported_funcs
    small = {n + k: f for k, f in enumerate(m.funcs) if _inlinable(f, limit)}
    origins: Origins = {}
    if not small:
        return m, origins
    funcs = []
    for k, f in enumerate(m.funcs):
        if not any(ins.op == Op.CALL and ins.imm in small and ins.imm != n + k for ins in f.body):
            funcs.append(f)
            continue
        new, ranges = _inline_into(f, n + k, small)
        funcs.append(new)
        origins[n + k] = ranges
    return replace(m, funcs=funcs), origins


def _inlinable(f: Function, limit: int) -> bool:
    if len(f.body) - 1 > limit:
        return False
    if any(ins.op in _NO_INLINE for ins in f.body):
        return False
    # locals of a type we cannot zero with a constant (references) stay out
    return all(t in _ZERO for t in f.locals[f.num_params :])


def _inline_into(f: Function, index: int, small: dict[int, Function]) -> tuple[Function, list[tuple[int, int, int]]]:
    locals_ = list(f.locals)
    body: list[Instr] = []
    ranges: list[tuple[int, int, int]] = []
    for ins in f.body:
        target = ins.imm if ins.op == Op.CALL and isinstance(ins.imm, int) else None
        callee = small.get(target) if target is not None and target != index else None
        if target is None or callee is None:
            body.append(_copy(ins))
            continue
        base = len(locals_)
        first = len(body)
        locals_.extend(callee.locals)
        body.append(Instr(Op.BLOCK, BlockType(type_index=callee.type_index), ins.offset))
        for p in reversed(range(callee.num_params)):
            body.append(Instr(Op.LOCAL_SET, base + p, ins.offset))
        for j in range(callee.num_params, len(callee.locals)):
            body.append(Instr(_ZERO[callee.locals[j]], 0, ins.offset))
            body.append(Instr(Op.LOCAL_SET, base + j, ins.offset))
        depth = 0  # blocks open inside the callee's body
        for c in callee.body[:-1]:
            op, imm = c.op, c.imm
            if op in (Op.LOCAL_GET, Op.LOCAL_SET, Op.LOCAL_TEE):
                assert isinstance(imm, int)
                imm = base + imm
            elif op == Op.RETURN:
                op, imm = Op.BR, depth
            if c.op in (Op.BLOCK, Op.LOOP, Op.IF):
                depth += 1
            elif c.op == Op.END:
                depth -= 1
            body.append(Instr(op, imm, c.offset))
        body.append(Instr(Op.END, None, ins.offset))
        ranges.append((first, len(body), target))
    _link_blocks(body)
    return replace(f, locals=tuple(locals_), body=body), ranges


def _copy(ins: Instr) -> Instr:
    return Instr(ins.op, ins.imm, ins.offset)


def _link_blocks(body: list[Instr]) -> None:
    """Recompute each block/loop/if's ``end`` and each if's ``else_`` index."""
    open_: list[int] = []
    for i, ins in enumerate(body):
        if ins.op in (Op.BLOCK, Op.LOOP, Op.IF):
            open_.append(i)
        elif ins.op == Op.ELSE:
            body[open_[-1]].else_ = i
        elif ins.op == Op.END and open_:
            body[open_.pop()].end = i
