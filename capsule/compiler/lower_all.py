"""Lowering every function of a module: from the cache where it can, on both cores where it pays.

Once the plan is made, lowering one function depends only on that function and on ``ModuleInfo``
(``function_cache`` says what that covers), so functions are lowered independently: a forked pool of workers
inherits ``info`` and returns each function pickled. The only state lowering leaves behind, the soft-float
functions the code calls (``info.library_used``), travels with each result; each function is lowered with an
empty set so that what it records is its own, whichever worker lowered what before it.

The result is the same list, byte for byte, with or without the pool and the cache (``tests/compiler/
test_lower_all.py`` builds both ways). A function whose lowering fails is lowered again in this process, in
index order, so the error raised is the one a serial build raises. Small modules are lowered here serially and
uncached: a pool or a file per function costs them more than lowering does.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from concurrent.futures import ProcessPoolExecutor

from .function import compile_function
from .function_cache import FunctionCache, dumps, function_digest
from .state import LoweredFunction, ModuleInfo

# below this many wasm instructions a module is lowered serially and not cached (the spec suite's modules,
# the small test programs): forking a pool and writing files costs more than lowering them
POOL_MIN_INSTRUCTIONS = 20_000
CHUNKS_PER_WORKER = 4  # several chunks per worker, so that one large function does not leave a core idle

_ENV_JOBS = "CAPSULE_JOBS"  # "1": lower in this process only
_ENV_CACHE = "CAPSULE_LOWERED_CACHE"  # "0": no function cache

_INFO: ModuleInfo | None = None  # the module a forked worker lowers (inherited, not pickled)


def default_jobs() -> int:
    env = os.environ.get(_ENV_JOBS, "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0))


def default_cache() -> bool:
    return os.environ.get(_ENV_CACHE, "1") != "0"


def _lower_one(info: ModuleInfo, index: int) -> tuple[LoweredFunction, set[str]]:
    used, info.library_used = info.library_used, set()
    try:
        lowered = compile_function(info, index, leaf=index in info.leaves)
        return lowered, info.library_used
    finally:
        info.library_used = used | info.library_used


def _worker(indices: list[int]) -> list[tuple[int, bytes | None]]:
    """Lower ``indices`` of the inherited module: each result pickled, or None where lowering failed."""
    assert _INFO is not None, "a lowering worker runs only in a pool forked by lower_functions"
    out: list[tuple[int, bytes | None]] = []
    for index in indices:
        try:
            out.append((index, dumps(_lower_one(_INFO, index))))
        except Exception:  # noqa: BLE001 - lowered again by the parent, which raises the error itself
            out.append((index, None))
    return out


def _chunks(info: ModuleInfo, indices: list[int], n: int) -> list[list[int]]:
    """``indices`` in ``n`` groups of about equal body size (largest first, each to the lightest group)."""
    groups: list[list[int]] = [[] for _ in range(n)]
    weight = [0] * n
    for index in sorted(indices, key=lambda i: -len(_body(info, i))):
        k = weight.index(min(weight))
        groups[k].append(index)
        weight[k] += len(_body(info, index)) + 1
    return [g for g in groups if g]


def _body(info: ModuleInfo, index: int) -> list[object]:
    func = info.module.defined_func(index)
    assert func is not None
    return func.body  # type: ignore[return-value]


def lower_functions(info: ModuleInfo, indices: list[int], *, jobs: int | None = None,
                    cache: FunctionCache | bool | None = None) -> list[LoweredFunction]:
    """``compile_function`` of every index, in order, with ``info.library_used`` updated as a serial loop
    would. ``jobs`` is how many processes lower (default: the CPUs this process may use, or ``$CAPSULE_JOBS``);
    ``cache`` a ``FunctionCache``, or whether to use the default one (default: yes unless
    ``$CAPSULE_LOWERED_CACHE=0``). Both apply only to modules of ``POOL_MIN_INSTRUCTIONS`` or more."""
    size = sum(len(_body(info, i)) for i in indices)
    if size < POOL_MIN_INSTRUCTIONS:
        return [compile_function(info, i, leaf=i in info.leaves) for i in indices]
    jobs = default_jobs() if jobs is None else jobs
    if cache is None:
        cache = default_cache()
    store = (FunctionCache(info) if cache else None) if isinstance(cache, bool) else cache
    keys = {i: function_digest(info.module.defined_func(i), i) for i in indices} if store else {}  # type: ignore[arg-type]
    done: dict[int, tuple[LoweredFunction, set[str]]] = {}
    if store is not None:
        for i in indices:
            hit = store.get(keys[i])
            if hit is not None:
                done[i] = hit
    todo = [i for i in indices if i not in done]
    pickled: dict[int, bytes | None] = {}
    if jobs > 1 and len(todo) > 1:
        pickled = _lower_in_pool(info, todo, jobs)
    out: list[LoweredFunction] = []
    for i in indices:
        if i in done:
            lowered, library = done[i]
        elif pickled.get(i) is not None:
            data = pickled[i]
            assert data is not None
            lowered, library = pickle.loads(data)
            if store is not None:
                store.put(keys[i], data)
        else:  # serial, or a function a worker failed on: here it raises the build's error
            lowered, library = _lower_one(info, i)
            if store is not None:
                store.put(keys[i], dumps((lowered, library)))
        info.library_used |= library
        out.append(lowered)
    return out


def _lower_in_pool(info: ModuleInfo, todo: list[int], jobs: int) -> dict[int, bytes | None]:
    global _INFO
    _INFO = info
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            results: dict[int, bytes | None] = {}
            for part in pool.map(_worker, _chunks(info, todo, jobs * CHUNKS_PER_WORKER)):
                results.update(part)
            return results
    finally:
        _INFO = None
