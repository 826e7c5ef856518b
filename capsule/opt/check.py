"""Proof by the kernel: an optimised program must verify and behave like the original on the same inputs.

For each program the ``Checker`` first records the original: it loads it into fresh maps (same initial
contents each time: the object's global data plus a few deterministic entries in array and hash maps), runs
it on every generated input with BPF_PROG_TEST_RUN and, after each run, records the return value, the output
packet or context, and the contents of every map it can read. It does that twice; a program whose two
recordings differ depends on time, randomness or the CPU and can only be checked by verification.

A candidate is then loaded the same way and must verify (its processed instructions, verification time and
JITed size are recorded), reproduce the recording exactly, and (unless ``keep_npi`` is off) not make the
verifier process more instructions than the program it would replace: the pass is then skipped for that
program, its refusal marked with ``NPI_REFUSED``. Program types that BPF_PROG_TEST_RUN cannot
run (tracepoints, kprobes, ...) are checked by verification only. Ring buffers and arenas are not compared
(their contents cannot be read without consuming or faulting them); programs using them are still compared on
everything else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from capsule.bpf.opcodes import Class
from capsule.bpf.spec import ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapType, ProgType
from capsule.kernel.collection import create_maps, load_object_btf, load_program
from capsule.kernel.consts import LogLevel
from capsule.kernel.errors import BPFError, LoadError, VerifierError
from capsule.kernel.maps import Map
from capsule.kernel.prog import Program
from capsule.kernel.sys import FD

from .analysis import Analysis
from .effects import mem_size
from .inputs import context_buffers, map_seed_entries, packets
from .rewrite import Code
from .values import Kind

__all__ = ["Checker", "LoadStats", "RUNNABLE", "PACKET_TYPES", "NPI_REFUSED"]

NPI_REFUSED = "the verifier would process more instructions"

PACKET_TYPES = {ProgType.XDP, ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.SOCKET_FILTER,
                ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT, ProgType.LWT_XMIT}
RUNNABLE = PACKET_TYPES | {ProgType.SYSCALL}
_SEEDED = {MapType.HASH, MapType.ARRAY, MapType.LRU_HASH}
_DUMPED = {MapType.HASH, MapType.ARRAY, MapType.LRU_HASH, MapType.PERCPU_ARRAY, MapType.PERCPU_HASH,
           MapType.LRU_PERCPU_HASH}
_MAX_CTX = 4096
# one input's result: (retval, data out, context out) or ("error", errno), and every dumped map's contents
Output = tuple[tuple[object, ...], dict[str, object]]


@dataclass
class LoadStats:
    processed_insns: int | None
    verification_time_us: int | None
    jited_size: int
    xlated_size: int

    def as_dict(self) -> dict[str, int | None]:
        return dict(processed_insns=self.processed_insns, verification_time_us=self.verification_time_us,
                    jited_size=self.jited_size, xlated_size=self.xlated_size)


@dataclass
class _Reference:
    outputs: list[Output] | None  # None: not comparable by running
    note: str
    stats: LoadStats
    ctx_size: int = 0


@dataclass
class Checker:
    """Checks candidates of the programs of one object. Close it (or ``with``) to release the BTF fd."""

    spec: ObjectSpec
    # refuse a candidate whose verifier processed instructions (NPI) exceed the current program's: a rewrite
    # that makes the verifier work more is not an optimisation, whatever it saves in size
    keep_npi: bool = True
    refs: dict[str, _Reference] = field(default_factory=dict)
    last_stats: dict[str, LoadStats] = field(default_factory=dict)
    _btf: FD | None = None
    _btf_loaded: bool = False

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._btf is not None:
            self._btf.close()
            self._btf = None

    def _btf_fd(self) -> FD | None:
        if not self._btf_loaded:
            self._btf = load_object_btf(self.spec)
            self._btf_loaded = True
        return self._btf

    # -- one side --------------------------------------------------------------------------------------
    def _maps(self) -> dict[str, Map]:
        maps = create_maps(self.spec, self._btf_fd())
        for name, m in maps.items():
            ms = self.spec.maps[name]
            if ms.type in _SEEDED and ms.contents is None and ms.section is None and not name.startswith("."):
                for k, v in map_seed_entries(name, ms.key_size, ms.value_size, min(4, ms.max_entries)):
                    try:
                        m.update(k, v)
                    except BPFError:
                        break  # e.g. a value with special fields; leave it empty
        return maps

    def _side(self, ps: ProgramSpec, ctx_size: int, runs: bool) -> tuple[LoadStats, list[Output] | None]:
        """Load ``ps`` into fresh maps, optionally run every input; (stats, outputs)."""
        maps = self._maps()
        try:
            prog = load_program(ps, maps, self._btf_fd(), log_level=LogLevel.BRANCHES | LogLevel.STATS)
            with prog:
                info = prog.info()
                st = prog.stats
                stats = LoadStats(st.processed_insns if st else None, st.verification_time_usec if st else None,
                                  info.jited_prog_len, info.xlated_prog_len)
                if not runs:
                    return stats, None
                return stats, self._run_all(prog, ps.type, ctx_size, maps)
        finally:
            for m in maps.values():
                m.close()

    def _run_all(self, prog: Program, ptype: int, ctx_size: int, maps: dict[str, Map]) -> list[Output]:
        out: list[Output] = []
        inputs: list[tuple[bytes, bytes | None]]  # (packet, context)
        if ptype == ProgType.SYSCALL:
            inputs = [(b"", c) for c in context_buffers(ctx_size)]
        else:
            inputs = [(p, None) for p in packets()]
        # test runs execute on the calling CPU: pin it, or per-CPU maps would differ between the two sides
        # only because the scheduler moved this thread
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        try:
            for data, ctx in inputs:
                try:
                    r = prog.test_run(data, ctx)
                    row: tuple[object, ...] = (r.retval, r.data_out, r.ctx_out)
                except BPFError as e:
                    row = ("error", e.errno)
                out.append((row, _dump(maps)))
        finally:
            os.sched_setaffinity(0, cpus)
        return out

    # -- the public checks -----------------------------------------------------------------------------
    def reference(self, name: str) -> _Reference:
        """Record the original program (once)."""
        if name in self.refs:
            return self.refs[name]
        ps = self.spec.programs[name]
        runs = ps.type in RUNNABLE
        ctx_size = _ctx_size(ps) if ps.type == ProgType.SYSCALL else 0
        try:
            stats, first = self._side(ps, ctx_size, runs)
        except (BPFError, LoadError) as e:
            raise LoadError(f"the original program {name!r} does not load: {e}") from e
        if ps.type == ProgType.SYSCALL:
            while first and all(row[0] == ("error", 22) for row in first) and ctx_size < _MAX_CTX:
                ctx_size *= 2  # EINVAL: the buffer is smaller than what the program reads
                stats, first = self._side(ps, ctx_size, runs)
        note = "run on generated inputs"
        outputs = first
        if not runs:
            tname = ProgType(ps.type).label.lower()
            note = f"verified only: {tname} programs cannot be test-run"
        else:
            assert first is not None  # a runnable program's side runs every input
            _, second = self._side(ps, ctx_size, runs)
            if second != first:
                note = "verified only: the original's results differ between runs (time, randomness, CPU)"
                outputs = None
            elif all(row[0][0] == "error" for row in first):
                note = "verified only: the kernel refuses to test-run it"
                outputs = None
        ref = _Reference(outputs, note, stats, ctx_size)
        self.refs[name] = ref
        self.last_stats[name] = stats
        return ref

    def __call__(self, name: str, candidate: ProgramSpec) -> str | None:
        """None when ``candidate`` verifies and behaves like the original; else why not."""
        ref = self.reference(name)
        try:
            stats, outputs = self._side(candidate, ref.ctx_size, ref.outputs is not None)
        except VerifierError as e:
            return f"rejected by the verifier: {e.reason or e}"
        except (BPFError, LoadError) as e:
            return f"does not load: {e}"
        if ref.outputs is not None and outputs != ref.outputs:
            return _first_difference(ref.outputs, outputs or [])
        prev = self.last_stats.get(name, ref.stats).processed_insns
        if self.keep_npi and prev is not None and stats.processed_insns is not None and \
                stats.processed_insns > prev:
            return f"{NPI_REFUSED}: {prev} -> {stats.processed_insns}"
        self.last_stats[name] = stats
        return None

    def stats_of(self, name: str, ps: ProgramSpec) -> LoadStats:
        """Load ``ps`` once (no runs) and return its figures."""
        stats, _ = self._side(ps, 0, False)
        return stats


def _dump(maps: dict[str, Map]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, m in maps.items():
        if m.type not in _DUMPED:
            continue
        try:
            out[name] = sorted(m.items())
        except BPFError as e:
            out[name] = ("unreadable", e.errno)
    return out


def _first_difference(want: list[Output], got: list[Output]) -> str:
    for k, (a, b) in enumerate(zip(want, got, strict=False)):
        if a[0] != b[0]:
            return f"input {k}: result {b[0][:1]} differs from the original's {a[0][:1]} (or its output data)"
        if a[1] != b[1]:
            names = [n for n in a[1] if a[1].get(n) != b[1].get(n)]
            return f"input {k}: map contents differ from the original's ({', '.join(names)})"
    return "different number of results"


def _ctx_size(ps: ProgramSpec) -> int:
    """How much context a SYSCALL program reads or writes (at least 64 bytes), from the value analysis."""
    try:
        a = Analysis(Code.from_program(ps), ps.type)
        vals = a.values
    except Exception:  # an analysis problem must not stop checking; a generous buffer will do
        return 512
    need = 64
    for i, ins in enumerate(a.code.insns):
        if ins.cls in (Class.LDX, Class.ST, Class.STX):
            base = ins.src if ins.cls == Class.LDX else ins.dst
            v = vals.reg(i, base)
            if v.kind == Kind.CTX:
                off = v.const_offset
                if off is None:
                    return 512
                need = max(need, off + ins.off + mem_size(ins))
    return (need + 7) & ~7
