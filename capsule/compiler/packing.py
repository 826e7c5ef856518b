"""Which physical function each wasm function goes into, decided before lowering.

Deciding first lets lowering know whether a callee shares the caller's physical function, and a call between
two such functions is a direct jump instead of a trip through the dispatcher (``calls``); so the plan puts
functions that call each other often together. Sizes are estimated from the wasm bodies (clang's code lowers to
about ``BPF_PER_WASM`` BPF instructions per wasm instruction); a physical function aims at ``phys_target``
instructions, the plan's only size limit.

The plan: the call graph's edges, weighted by how many call sites they have (a call inside a loop counts
``LOOP_WEIGHT`` times), are taken heaviest first, and each joins its two functions' clusters while the cluster
stays under the target; then clusters are packed largest first into the physical function holding the least
code, as single functions were before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from capsule.wasm import Module, Op

from . import abi
from .code import RegionKey

BPF_PER_WASM = 2.5
LOOP_WEIGHT = 8
LEAF_STUB_SIZE = 12  # a leaf's entry region in a physical function: a call and a return
SCAN_PER_INSN = 40  # the kernel's stack-depth walk may scan a physical function's calls this many times its size


@dataclass(frozen=True)
class Plan:
    """Function index -> physical function, for every defined function (leaves: their entry stub); the pairs
    (p, q) of physical functions where p may call q as a BPF function (``nested``); and which BPF program
    holds which physical functions."""

    phys_of: dict[int, int]
    nphys: int
    leaves: frozenset[int]
    calls: frozenset[tuple[int, int]] = frozenset()
    # programs: physical functions [0, shared) are in every program, then each its own range
    shared: int = 0
    programs: tuple[range, ...] = ()

    def local(self, k: int) -> list[int]:
        """The physical functions program ``k`` holds."""
        return [*range(self.shared), *self.programs[k]]

    def owner(self, p: int) -> int:
        """The program a state in physical function ``p`` is handed to (a shared one: the first)."""
        return next((k for k, r in enumerate(self.programs) if p in r), 0)

    def nested(self, caller: int, callee: int) -> bool:
        """Whether a call from ``caller`` may call the callee's physical function as a BPF function, which runs
        the callee and, unless it suspends, returns straight to the caller (``calls``)."""
        if callee in self.leaves:
            return False
        p, q = self.phys_of.get(caller), self.phys_of.get(callee)
        return p is not None and q is not None and (p, q) in self.calls

    def direct(self, caller: int, callee: int) -> bool:
        """Whether a call from ``caller`` to ``callee`` can jump straight to the callee's entry: both in one
        physical function, and the callee not a leaf (leaves are called as BPF functions)."""
        if callee in self.leaves:
            return False
        p = self.phys_of.get(callee)
        return p is not None and p == self.phys_of.get(caller)


def estimate(m: Module, index: int, leaves: frozenset[int]) -> int:
    """Estimated BPF instructions of function ``index`` in a physical function."""
    return LEAF_STUB_SIZE if index in leaves else body_size(m, index)


def body_size(m: Module, index: int) -> int:
    """Estimated BPF instructions of defined function ``index``'s body."""
    func = m.defined_func(index)
    assert func is not None
    return max(1, math.ceil(len(func.body) * BPF_PER_WASM))


def call_sites(m: Module) -> dict[tuple[int, int], int]:
    """(caller, callee) -> how many call instructions the caller has for the callee."""
    n = m.num_imported_funcs
    out: dict[tuple[int, int], int] = {}
    for k, f in enumerate(m.funcs):
        for ins in f.body:
            if ins.op == Op.CALL and isinstance(ins.imm, int) and ins.imm >= n:
                out[(n + k, ins.imm)] = out.get((n + k, ins.imm), 0) + 1
    return out


def call_weights(m: Module) -> dict[tuple[int, int], int]:
    """(caller, callee) -> call sites, a call inside a loop counting LOOP_WEIGHT times per loop level."""
    n = m.num_imported_funcs
    out: dict[tuple[int, int], int] = {}
    for k, f in enumerate(m.funcs):
        loops: list[bool] = []
        for ins in f.body:
            if ins.op in (Op.BLOCK, Op.IF):
                loops.append(False)
            elif ins.op == Op.LOOP:
                loops.append(True)
            elif ins.op == Op.END and loops:
                loops.pop()
            elif ins.op == Op.CALL and isinstance(ins.imm, int) and ins.imm >= n:
                key = (n + k, ins.imm)
                out[key] = out.get(key, 0) + LOOP_WEIGHT ** sum(loops)
    return out


def bands(m: Module, leaves: frozenset[int], top: int) -> dict[int, int]:
    """Each function's band: its height in the call graph (0 for a function that calls nothing but leaves,
    else one more than the highest band it calls outside its own strongly connected component), at most
    ``top``. Calls from a higher band to a lower one never close a cycle, so they may be BPF calls."""
    n = m.num_imported_funcs
    funcs = list(range(n, n + len(m.funcs)))
    callees: dict[int, set[int]] = {f: set() for f in funcs}
    for a, b in call_sites(m):
        if b not in leaves:
            callees[a].add(b)
    order = components(funcs, callees)
    comp = {f: c for c, members in enumerate(order) for f in members}
    height: dict[int, int] = {}
    for c, members in enumerate(order):
        below = [height[comp[b]] for f in members for b in callees[f] if comp[b] != c]
        height[c] = 1 + max(below) if below else 0
    return {f: min(height[comp[f]], top) for f in funcs}


def components(nodes: Sequence[int], edges: dict[int, set[int]]) -> list[list[int]]:
    """The strongly connected components of a graph, callees before callers (Tarjan's, iteratively: call
    graphs can be deep)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    order: list[list[int]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            f, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[f] = min(low[f], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[f])
            if low[f] == index[f]:
                members = []
                while True:
                    g = stack.pop()
                    on.discard(g)
                    members.append(g)
                    if g == f:
                        break
                order.append(members)
    return order


def on_cycles(edges: dict[int, set[int]]) -> frozenset[int]:
    """The nodes that lie on a cycle (a component of two or more, or a node with an edge to itself)."""
    return frozenset(f for c in components(sorted(edges), edges) for f in c
                     if len(c) > 1 or f in edges[f])


# Once an object is split, each program aims at PART_BUDGET estimated instructions (or the object's own budget,
# when smaller), of which the physical functions every program holds a copy of take at most SHARED_SHARE.
# Loading costs about (may_goto sites) x (program size) per program (each may_goto is a patch of the whole
# program, ``docs/COMPILER.md``), so smaller parts load faster, and copies are verified and patched once per
# program. Measured on the SQLite shell (CPU seconds to lower and load, then one run of its test script, on a
# loaded machine): 0.3 of 350k, 7 programs, 69.0 s, run 0.81 s; 0.05 of 200k, 8 programs, 45.6 s, run 1.00 s
# (10% more transitions, many between programs); 0.15 of 200k, 9 programs, 41.5 s, run 0.83 s.
PART_BUDGET = 200_000
SHARED_SHARE = 0.15


def plan(m: Module, leaves: frozenset[int], target: int, per_program: int, max_nest: int = 0,
         program_budget: int = 1 << 62) -> Plan:
    """Physical functions band by band (``bands``), each band's functions clustered along their heaviest
    calls and packed to the target size; a call to a lower band may be a BPF call (at most ``max_nest``
    deep, as the bands are), a call inside one physical function a jump. When they hold more than
    ``program_budget`` instructions or ``per_program`` physical functions, they are split into programs
    (``programs``)."""
    n = m.num_imported_funcs
    funcs = list(range(n, n + len(m.funcs)))
    size = {f: estimate(m, f, leaves) for f in funcs}
    band = bands(m, leaves, max(0, max_nest))
    # clusters by union-find, joined along the heaviest edges while they fit (within a band)
    parent = {f: f for f in funcs}
    weight = dict(size)

    def root(f: int) -> int:
        while parent[f] != f:
            parent[f] = parent[parent[f]]
            f = parent[f]
        return f

    edges = sorted(((w, a, b) for (a, b), w in call_weights(m).items()
                    if a != b and b not in leaves and band[a] == band[b]), key=lambda e: (-e[0], e[1], e[2]))
    for _, a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb and weight[ra] + weight[rb] <= target:
            parent[rb] = ra
            weight[ra] += weight[rb]
    clusters: dict[int, list[int]] = {}
    for f in funcs:
        clusters.setdefault(root(f), []).append(f)
    phys_of: dict[int, int] = {}
    phys_band: list[int] = []
    phys_size: list[int] = []
    for b in sorted({band[r] for r in clusters}):
        mine = sorted((r for r in clusters if band[r] == b), key=lambda r: (-weight[r], r))
        share = sum(weight[r] for r in mine)
        count = max(1, min(math.ceil(share / target), len(mine)))
        base = len(phys_band)
        fill = [0] * count
        for r in mine:
            p = fill.index(min(fill))
            for f in clusters[r]:
                phys_of[f] = base + p
            fill[p] += weight[r]
        phys_band += [b] * count
        phys_size += fill
    if len(phys_band) > abi.MAX_PHYS:
        raise ValueError(f"{len(phys_band)} physical functions, more than the {abi.MAX_PHYS} region ids can name")
    between: dict[tuple[int, int], int] = {}
    for (a, b), w in call_weights(m).items():
        if b not in leaves and phys_of[a] != phys_of[b]:
            key = (min(phys_of[a], phys_of[b]), max(phys_of[a], phys_of[b]))
            between[key] = between.get(key, 0) + w
    order, shared, programs = programs_of(phys_size, between, program_budget, per_program)
    if order != list(range(len(order))):  # renumber so that each program's own physical functions follow
        new = {old: k for k, old in enumerate(order)}
        phys_of = {f: new[p] for f, p in phys_of.items()}
        phys_band = [phys_band[old] for old in order]
    calls = _nested_calls(m, phys_of, phys_band, phys_size, leaves, shared, programs) if max_nest > 0 else frozenset()
    return Plan(phys_of, len(phys_band), leaves, calls, shared, programs)


def _nested_calls(m: Module, phys_of: dict[int, int], phys_band: list[int], phys_size: list[int],
                  leaves: frozenset[int], shared: int, programs: tuple[range, ...]) -> frozenset[tuple[int, int]]:
    """The pairs (p, q) where p calls q as a BPF function: q in a lower band and in p's program, heaviest
    calls first, while p's ``scan`` cost stays within SCAN_PER_INSN times its own size.

    The kernel checks the stack depth of a program by walking every call path from its entry and scanning
    each subprogram's instructions on every visit (``check_max_stack_depth``), with no memo: p's cost is its
    size plus, for each call instruction, its callee's cost. Nesting every lower-band call made Lua's walk
    9.2 billion instructions (24,000 times the program, about 7 s of its load); the cap keeps it linear."""
    sites: dict[tuple[int, int], int] = {}
    leaf_cost = [0] * len(phys_band)
    for (a, b), k in call_sites(m).items():
        if b in leaves:
            leaf_cost[phys_of[a]] += k * body_size(m, b)
        elif phys_of[a] != phys_of[b]:
            key = (phys_of[a], phys_of[b])
            sites[key] = sites.get(key, 0) + k
    weights: dict[tuple[int, int], int] = {}
    for (a, b), w in call_weights(m).items():
        key = (phys_of[a], phys_of[b])
        if key in sites:
            weights[key] = weights.get(key, 0) + w
    callees: dict[int, list[int]] = {}
    for p, q in sites:
        if phys_band[p] > phys_band[q] and _together(p, q, shared, programs):
            callees.setdefault(p, []).append(q)
    cost = [phys_size[p] + leaf_cost[p] for p in range(len(phys_band))]
    chosen: set[tuple[int, int]] = set()
    for p in sorted(range(len(phys_band)), key=lambda p: (phys_band[p], p)):  # callees' costs first
        room = SCAN_PER_INSN * max(phys_size[p], 1) - cost[p]
        for q in sorted(callees.get(p, []), key=lambda q: (-weights.get((p, q), 0) / (sites[(p, q)] * cost[q]), q)):
            extra = sites[(p, q)] * cost[q]
            if extra <= room:
                chosen.add((p, q))
                cost[p] += extra
                room -= extra
    return frozenset(chosen)


def programs_of(sizes: list[int], calls: dict[tuple[int, int], int], budget: int,
                per_program: int) -> tuple[list[int], int, tuple[range, ...]]:
    """Split physical functions (in band order, lowest first) into programs: ``shared``, the first ones, which
    every program holds a copy of (the small functions everything calls, so that calling them never leaves a
    program), and then each program's own physical functions, grouped along their heaviest ``calls`` (a
    call between two programs is a tail call and, its return, another), within ``budget`` instructions and
    ``per_program`` physical functions each. Returns the new order of the physical functions (each program's
    own ones contiguous), ``shared``, and each program's range in that order."""
    n = len(sizes)
    identity = list(range(n))
    if sum(sizes) <= budget and n <= per_program:
        return identity, 0, (range(0, n),)
    budget = min(budget, PART_BUDGET)
    shared = 0
    used = 0
    while shared < n and used + sizes[shared] <= budget * SHARED_SHARE and shared < per_program // 3:
        used += sizes[shared]
        shared += 1
    room, slots = max(1, budget - used), max(1, per_program - shared)
    parent = {p: p for p in range(shared, n)}
    weight = {p: sizes[p] for p in parent}
    count = dict.fromkeys(parent, 1)

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for (a, b), _ in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
        if a < shared or b < shared:
            continue
        ra, rb = root(a), root(b)
        if ra != rb and weight[ra] + weight[rb] <= room and count[ra] + count[rb] <= slots:
            parent[rb] = ra
            weight[ra] += weight[rb]
            count[ra] += count[rb]
    groups: dict[int, list[int]] = {}
    for p in range(shared, n):
        groups.setdefault(root(p), []).append(p)
    bins: list[list[int]] = []
    fill: list[int] = []
    for r in sorted(groups, key=lambda r: (-weight[r], r)):  # first fit, largest first
        k = next((k for k in range(len(bins)) if fill[k] + weight[r] <= room
                  and len(bins[k]) + len(groups[r]) <= slots), None)
        if k is None:
            bins.append([])
            fill.append(0)
            k = len(bins) - 1
        bins[k] += groups[r]
        fill[k] += weight[r]
    if len(bins) > abi.MAX_PROGRAMS:
        raise ValueError(f"the program needs {len(bins)} BPF programs, more than {abi.MAX_PROGRAMS}")
    order = identity[:shared]
    programs: list[range] = []
    for members in bins:
        programs.append(range(len(order), len(order) + len(members)))
        order += sorted(members)
    return order, shared, tuple(programs)


def _together(p: int, q: int, shared: int, programs: tuple[range, ...]) -> bool:
    """Whether every program holding physical function ``p`` also holds ``q`` (a BPF call needs its callee in
    the caller's own program)."""
    if q < shared:
        return True
    return p >= shared and any(p in r and q in r for r in programs)


def region_ids(phys: Sequence[Sequence[Sequence[RegionKey]]]) -> dict[RegionKey, int]:
    """Region ids, from each physical function's functions' regions: a region's index inside its physical
    function, shifted left by PHYS_BITS, or'ed with the physical function's number."""
    ids: dict[RegionKey, int] = {}
    for p, funcs in enumerate(phys):
        q = 0
        for regions in funcs:
            for key in regions:
                ids[key] = (q << abi.PHYS_BITS) | p
                q += 1
    return ids
