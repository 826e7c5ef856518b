"""The loop benchmark's workload as a wasm module compiled by capsule: the loop *as the compiler emits it*.

The other rows of ``capsule bench loops`` are hand-shaped BPF; these rows answer what a user of the compiler
gets. The module is written in wat (so clang cannot fold or vectorise the loop away) and assembled with
``wat2wasm``::

    sum(n): mem[8] = 0; for (i = 0; i < n; i++) mem[8] = mem[8] + i; return mem[8]

The accumulator is an ``i64`` in linear memory, the seed's volatile accumulator: one load, one add, one store
per iteration, here through the arena window with capsule's bounds checks (the default ``checked`` build).
``n`` is the function's argument, so one loaded program serves every ``n``; ``bound=K`` builds the same loop
against the constant ``K`` instead, which shows that a constant bound costs the compiler's output nothing
more to verify (the verifier sees the loop counter as an unknown scalar either way: the loop head widens it).

Each profile is one row: ``wasm_may_goto`` is the default build (the back-edge is ``may_goto; goto head``
inside the region), ``wasm_dispatcher`` is ``Options(may_goto=False)`` (every back-edge stores the state and
returns to the dispatcher, which re-enters the loop head's region).

A call goes through ``Instance.call``, which may run the compiled entry point, ``capsule_run``, several times (a
spent budget is continued, the host serves the guest in between), so its time comes from ``bpf_stats``
(``run_time_ns`` of the program before and after a batch of calls). bpf_stats adds its own cost to each run;
subtracting a batch of ``sum(0)`` calls removes it together with the entry, the dispatcher and the function's
prologue.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from capsule.compiler import Options, compile_module
from capsule.ints import signed
from capsule.kernel import LogLevel
from capsule.kernel.prog import bpf_stats
from capsule.runtime import Instance
from capsule.toolchain.clang import ToolchainError
from capsule.wasm import load

#: row key -> the build options of that profile
PROFILES: dict[str, Options] = {
    "wasm_may_goto": Options(),
    "wasm_dispatcher": Options(may_goto=False),
}
ACC_ADDR = 8  # the accumulator's address in linear memory
EXPORT = "sum"

_WAT = """\
(module
  (memory (export "memory") 1)
  (func (export "sum") (param $n i64) (result i64)
    (local $i i64)
    (i64.store (i32.const {acc}) (i64.const 0))
    (block $done
      (loop $head
        (br_if $done (i64.ge_u (local.get $i) {bound}))
        (i64.store (i32.const {acc}) (i64.add (i64.load (i32.const {acc})) (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $head)))
    (i64.load (i32.const {acc}))))
"""


def loop_wat(bound: int | None = None) -> str:
    """The module's text; ``bound`` None compares against the argument ``n``, else against that constant."""
    if bound is not None and not 0 <= bound < 1 << 63:
        raise ValueError(f"a constant bound must fit a non-negative i64, got {bound}")
    cmp = "(local.get $n)" if bound is None else f"(i64.const {bound})"
    return _WAT.format(acc=ACC_ADDR, bound=cmp)


@lru_cache(maxsize=8)
def module_bytes(bound: int | None = None) -> bytes:
    """Assemble ``loop_wat(bound)`` with wabt's ``wat2wasm``."""
    tool = shutil.which("wat2wasm")
    if tool is None:
        raise ToolchainError("wat2wasm is not installed (wabt; scripts/setup.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "loop.wat", Path(tmp) / "loop.wasm"
        src.write_text(loop_wat(bound))
        res = subprocess.run([tool, str(src), "-o", str(out)], capture_output=True, text=True)
        if res.returncode:
            raise ToolchainError(f"wat2wasm refused the loop module:\n{res.stderr.rstrip()}")
        return out.read_bytes()


def expected_sum(n: int) -> int:
    """``sum(n)`` as the guest returns it: 0 + 1 + ... + (n-1), wrapped to a signed i64."""
    return signed(n * (n - 1) // 2, 64)


@dataclass
class WasmRun:
    """A batch of ``repeat`` calls ``sum(n)``; times are per call."""

    n: int
    repeat: int
    run_time_ns: float  # bpf_stats run_time_ns of capsule_run, summed over the call's invocations
    sum: int  # the last call's result
    invocations: int  # program runs per call (more than 1 when a call went PENDING and was continued)
    transitions: int  # dispatcher transitions per call (region entries)

    @property
    def ok(self) -> bool:
        return self.sum == expected_sum(self.n)

    @property
    def text(self) -> str:
        if not self.ok:
            return f"WRONG SUM: {self.sum}, expected {expected_sum(self.n)}"
        notes = []
        if self.invocations > 1:
            notes.append(f"{self.invocations:,} invocations")
        if self.transitions > 1:
            notes.append(f"{self.transitions:,} transitions")
        return "ok" + (f" ({', '.join(notes)})" if notes else "")


class WasmLoop:
    """One profile's compiled loop module, loaded into the kernel; close it (or use ``with``).

    Loading records what the verifier spent on the whole compiled program (entry, dispatcher, the function).
    """

    def __init__(self, key: str, *, bound: int | None = None) -> None:
        if key not in PROFILES:
            raise ValueError(f"unknown wasm loop profile {key!r} (known: {', '.join(PROFILES)})")
        self.key = key
        self.bound = bound
        self.options = PROFILES[key]
        t0 = time.perf_counter()
        spec = compile_module(load(module_bytes(bound)), self.options)
        self.compile_ms = (time.perf_counter() - t0) * 1e3
        self.instance = Instance(spec, log_level=LogLevel.STATS)
        try:
            self.load_ms = self.instance.load_seconds * 1e3
            stats = self.instance.prog.stats
            info = self.instance.prog.info()
            self.processed_insns: int = (stats.processed_insns if stats and stats.processed_insns is not None
                                         else info.verified_insns)
            self.verify_us: int | None = stats.verification_time_usec if stats else None
            self.xlated_insns = info.xlated_prog_len // 8
            self.jited_bytes = info.jited_prog_len
        except BaseException:
            self.instance.close()
            raise

    def close(self) -> None:
        self.instance.close()

    def __enter__(self) -> WasmLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, n: int, repeat: int = 1, *, budget: int = 1 << 62) -> WasmRun:
        """Call ``sum(n)`` ``repeat`` times with bpf_stats on; ``budget`` limits transitions per invocation
        (the host continues a PENDING call, as ``Instance.call`` always does)."""
        if n < 0 or repeat < 1:
            raise ValueError("n must be >= 0 and repeat >= 1")
        inst, prog = self.instance, self.instance.prog
        inv0, tr0 = inst.stats.invocations, inst.stats.transitions
        with bpf_stats():
            before = prog.info()
            result = 0
            for _ in range(repeat):
                (result,) = inst.call(EXPORT, n, budget=budget)
            after = prog.info()
        invocations = inst.stats.invocations - inv0
        if after.run_cnt - before.run_cnt != invocations:  # someone else ran our program: the time is not ours
            raise RuntimeError(f"capsule_run ran {after.run_cnt - before.run_cnt} times for {invocations} calls")
        return WasmRun(n, repeat, (after.run_time_ns - before.run_time_ns) / repeat, result, invocations // repeat,
                       (inst.stats.transitions - tr0) // repeat)
