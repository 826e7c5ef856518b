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
from dataclasses import dataclass

from capsule.wasm import Module, Op

from . import abi
from .code import RegionKey
from .state import LoweredFunction

BPF_PER_WASM = 2.5
LOOP_WEIGHT = 8
LEAF_STUB_SIZE = 12  # a leaf's entry region in a physical function: a call and a return


@dataclass(frozen=True)
class Plan:
    """Function index -> physical function, for every defined function (leaves: their entry stub), and the
    pairs (p, q) of physical functions where p may call q as a BPF function (``nested``)."""

    phys_of: dict[int, int]
    nphys: int
    leaves: frozenset[int]
    calls: frozenset[tuple[int, int]] = frozenset()

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
    if index in leaves:
        return LEAF_STUB_SIZE
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


def plan(m: Module, leaves: frozenset[int], target: int, max_phys: int, max_nest: int = 0) -> Plan:
    n = m.num_imported_funcs
    funcs = list(range(n, n + len(m.funcs)))
    size = {f: estimate(m, f, leaves) for f in funcs}
    # clusters by union-find, joined along the heaviest edges while they fit
    parent = {f: f for f in funcs}
    weight = dict(size)

    def root(f: int) -> int:
        while parent[f] != f:
            parent[f] = parent[parent[f]]
            f = parent[f]
        return f

    edges = sorted(((w, a, b) for (a, b), w in call_weights(m).items() if a != b and b not in leaves),
                   key=lambda e: (-e[0], e[1], e[2]))
    for _, a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb and weight[ra] + weight[rb] <= target:
            parent[rb] = ra
            weight[ra] += weight[rb]
    clusters: dict[int, list[int]] = {}
    for f in funcs:
        clusters.setdefault(root(f), []).append(f)
    total = sum(size.values()) or 1
    nphys = max(1, min(max_phys, abi.MAX_PHYS, math.ceil(total / target), len(clusters)))
    fill = [0] * nphys
    phys_of: dict[int, int] = {}
    for r in sorted(clusters, key=lambda r: (-weight[r], r)):
        p = fill.index(min(fill))
        for f in clusters[r]:
            phys_of[f] = p
        fill[p] += weight[r]
    used = sorted(set(phys_of.values()))  # renumber so that no physical function is empty
    renumber = {p: i for i, p in enumerate(used)}
    phys_of = {f: renumber[p] for f, p in phys_of.items()}
    between: dict[tuple[int, int], int] = {}
    for (a, b), w in call_weights(m).items():
        if b not in leaves and phys_of[a] != phys_of[b]:
            key = (phys_of[a], phys_of[b])
            between[key] = between.get(key, 0) + w
    return Plan(phys_of, len(used), leaves, nesting(between, len(used), max_nest))


def nesting(edges: dict[tuple[int, int], int], n: int, max_nest: int) -> frozenset[tuple[int, int]]:
    """Which calls between physical functions may be BPF calls. The verifier allows no recursion and at most
    eight frames of 512 bytes of stack in all, so the allowed calls must form a DAG no deeper than
    ``max_nest``: order the physical functions so that most call weight goes forward (Eades, Lin and Smyth's
    greedy heuristic for a feedback arc set), then keep forward calls while the depth allows."""
    out: dict[int, dict[int, int]] = {p: {} for p in range(n)}
    inc: dict[int, dict[int, int]] = {p: {} for p in range(n)}
    for (a, b), w in edges.items():
        out[a][b] = w
        inc[b][a] = w
    left = set(range(n))
    head: list[int] = []
    tail: list[int] = []

    def weight(d: dict[int, int]) -> int:
        return sum(w for q, w in d.items() if q in left)

    while left:
        moved = True
        while moved:
            moved = False
            for p in sorted(left):
                if not weight(out[p]):  # a sink: last
                    tail.insert(0, p)
                    left.discard(p)
                    moved = True
                elif not weight(inc[p]):  # a source: first
                    head.append(p)
                    left.discard(p)
                    moved = True
        if left:
            p = max(sorted(left), key=lambda p: weight(out[p]) - weight(inc[p]))
            head.append(p)
            left.discard(p)
    order = head + tail
    pos = {p: i for i, p in enumerate(order)}
    level: dict[int, int] = {}
    allowed: set[tuple[int, int]] = set()
    for p in reversed(order):
        targets = [q for q in out[p] if pos[q] > pos[p] and level[q] < max_nest]
        allowed.update((p, q) for q in targets)
        level[p] = 1 + max((level[q] for q in targets), default=-1)
    return frozenset(allowed)


def region_ids(phys: list[list[LoweredFunction]]) -> dict[RegionKey, int]:
    """Region ids: a region's index inside its physical function, shifted left by PHYS_BITS, or'ed with the
    physical function's number."""
    ids: dict[RegionKey, int] = {}
    for p, lowered in enumerate(phys):
        q = 0
        for f in lowered:
            for key in f.regions:
                ids[key] = (q << abi.PHYS_BITS) | p
                q += 1
    return ids
