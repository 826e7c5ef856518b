"""Faults of the bpf(2) layer (issue 15.2): every call an operation makes is failed in turn with EAGAIN, ENOMEM,
EPERM and E2BIG (``capsule.kernel.faults``); each gives a clean error (or, for a retried EAGAIN, success) and
releases everything already created: no descriptor left open (``/proc/self/fd``), none left for the garbage
collector to close, no window left mapped."""

from __future__ import annotations

import errno
import gc
import io
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from capsule.bpf.elf import read_object
from capsule.cli import main
from capsule.cli.inspect import verify_rows
from capsule.compiler import Options, compile_module
from capsule.kernel import Map, MapType, Program, RingBuffer, bpf_stats, create_ringbuf
from capsule.kernel.collection import Collection
from capsule.kernel.errors import LoadError
from capsule.kernel.faults import Faults, inject
from capsule.runtime.errors import CallError, GuestRejected
from capsule.runtime.instance import Instance
from capsule.runtime.wasi_host import WasiError
from capsule.wasm import load
from tests.clang import CORPUS, compile_bpf
from tests.fds import new_fds, open_fds
from tests.wasm.wasm_build import wat

from .objects import TINY_RESULT, tiny

pytestmark = pytest.mark.requires_bpf

ERRNOS = (errno.EAGAIN, errno.ENOMEM, errno.EPERM, errno.E2BIG)
CLEAN = (OSError, LoadError, CallError, GuestRejected, WasiError)  # what the CLI reports in one line
HELLO = Path(__file__).with_name("faults_hello.c")

SPLIT_WAT = """(module
  (memory 1)
  (func $a (param i32) (result i32) (local i32)
    (loop $l (local.set 1 (i32.add (local.get 1) (i32.const 1))) (br_if $l (i32.lt_u (local.get 1) (local.get 0))))
    (local.get 1))
  (func $b (param i32) (result i32) (call $a (i32.mul (local.get 0) (i32.const 3))))
  (func $c (export "c") (param i32) (result i32) (call $b (call $a (local.get 0))))
)"""  # loops and calls that are not inlined: each function a physical function of its own, each in its program


def _windows() -> int:
    """Mappings of BPF maps in this process (an arena left mapped after its map was closed would show here)."""
    return sum("anon_inode:bpf-map" in line for line in Path("/proc/self/maps").read_text().splitlines())


# -- the operations ---------------------------------------------------------------------------------------------
def op_instance() -> None:
    with Instance(tiny()) as inst:
        assert inst.call("f") == [TINY_RESULT]


def op_split_instance() -> None:
    spec = compile_module(load(wat(SPLIT_WAT)), Options(program_budget=1, phys_target=200, inline=False))
    with Instance(spec) as inst:
        assert len(inst.programs) > 1
        assert inst.call("c", 4) == [12]


def op_collection(name: str) -> Callable[[], None]:
    def op() -> None:
        spec = read_object(compile_bpf(CORPUS / f"{name}.c"))
        with Collection.load(spec) as coll:
            for prog in coll.programs.values():
                prog.info()
    return op


def op_maps_and_programs() -> None:
    with Map.create(MapType.HASH, 4, 8, 4, name="faults") as m:
        m.update(1, 7)
        assert m.lookup_int(1) == 7 and list(m.keys()) == [(1).to_bytes(4, "little")]
        m.delete(1)
        m.info()
    with Map.create(MapType.ARRAY, 4, 4, 1) as frozen:
        frozen.freeze()
    spec = read_object(compile_bpf(CORPUS / "syscall_globals.c"))
    with Collection.load(spec) as coll:
        prog = next(iter(coll.programs.values()))
        with Program.from_id(prog.info().id) as again:
            again.xlated()
        with bpf_stats():
            prog.info()
    with create_ringbuf(4096) as ring, RingBuffer(ring) as reader:
        reader.consume()


def op_verify() -> None:
    verify_rows(str(compile_bpf(CORPUS / "tc_switch.c")))


def op_cli_run() -> None:
    out, err = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())  # the host writes to .buffer
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["run", str(HELLO)])
    out.flush()
    err.flush()
    if status != 0:  # the fault became the command's error: one line, as for any user
        message = err.buffer.getvalue().decode()  # type: ignore[attr-defined]
        assert status == 1 and message.startswith("capsule: ") and message.count("\n") == 1, message
        raise CallError(message)
    assert b"line 3" in out.buffer.getvalue()  # type: ignore[attr-defined]


# name: (operation, whether every call is failed; else only the first call of each site, for a long run that
# repeats its calls)
OPERATIONS: dict[str, tuple[Callable[[], None], bool]] = {
    "instance": (op_instance, True),
    "split-instance": (op_split_instance, True),
    **{f"collection-{n}": (op_collection(n), True) for n in ("syscall_globals", "maps_ringbuf", "tc_switch",
                                                              "arena_list")},
    "maps-and-programs": (op_maps_and_programs, True),
    "verify": (op_verify, True),
    "cli-run": (op_cli_run, False),
}


def _plan(calls: list[tuple[str, str]], every: bool) -> list[tuple[int, int]]:
    """(call, errno) pairs to fail: every errno at the first call of each site, and (``every``) each other
    call with one errno, taken in turn."""
    first: dict[tuple[str, str], int] = {}
    for n, site in enumerate(calls, 1):
        first.setdefault(site, n)
    plan = {(n, err) for n in first.values() for err in ERRNOS}
    if every:
        plan |= {(n, ERRNOS[n % len(ERRNOS)]) for n in range(1, len(calls) + 1)}
    return sorted(plan)


@contextmanager
def _released() -> Iterator[None]:
    """The block must leave no descriptor and no mapping it made, and must close none by garbage collection."""
    gc.collect()
    fds, windows = open_fds(), _windows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not unclosed, f"descriptors closed only by the garbage collector: {unclosed}"
    assert not new_fds(fds, open_fds()), f"descriptors left open: {new_fds(fds, open_fds())}"
    assert _windows() == windows, "a window is still mapped"


def _calls(op: Callable[[], None]) -> Faults:
    with _released():
        op()  # once first: what the process caches (the kernel's feature probes) is then made, and every
        # counted and faulted run makes the same calls
    with _released(), inject() as faults:
        op()
    assert faults.count > 0
    return faults


@pytest.mark.parametrize("name", OPERATIONS)
def test_every_failed_call_is_clean_and_releases_everything(name: str) -> None:
    op, every = OPERATIONS[name]
    counted = _calls(op)
    plan = _plan(counted.calls, every)
    outcomes: dict[str, int] = {}
    for n, err in plan:
        with _released(), inject(at=n, err=err) as faults:
            try:
                op()
                outcome = "succeeded"
            except CLEAN as e:
                outcome = type(e).__name__
                assert str(e), f"call {n} ({faults.fired}) failed with {errno.errorcode[err]}: empty message"
            except Exception as e:
                raise AssertionError(f"call {n} ({faults.fired}) failed with {errno.errorcode[err]}: not a clean "
                                     f"error but {type(e).__name__}: {e}") from e
        assert faults.fired is not None
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"\n{name}: {counted.count} calls at {len(set(counted.calls))} sites, {len(plan)} faults: {outcomes}")
    assert set(outcomes) - {"succeeded"}, "no fault made the operation fail"


def test_eagain_at_load_is_retried() -> None:
    """The verifier was interrupted: a program load that gets EAGAIN is tried again, as libbpf does."""
    counted = _calls(op_instance)
    load_at = next(n for n, (cmd, _) in enumerate(counted.calls, 1) if cmd == "PROG_LOAD")
    with _released(), inject(at=load_at, err=errno.EAGAIN) as faults:
        op_instance()
    assert faults.fired == ("PROG_LOAD", "kernel/prog.py:attempt")


def test_every_call_site_of_the_kernel_layer_is_reached() -> None:
    """The operations above between them reach every function of capsule.kernel that makes a bpf(2) call,
    except attaching (links need a network device: tests/kernel/test_link.py) and BTF by id."""
    sites: set[str] = set()
    for op, _ in OPERATIONS.values():
        sites |= {site for _, site in _calls(op).calls}
    expected = {"kernel/btf.py:load_btf", "kernel/maps.py:create", "kernel/maps.py:lookup", "kernel/maps.py:update",
                "kernel/maps.py:delete", "kernel/maps.py:next_key", "kernel/maps.py:freeze", "kernel/maps.py:info",
                "kernel/prog.py:attempt", "kernel/prog.py:from_id", "kernel/prog.py:info", "kernel/prog.py:xlated",
                "kernel/prog.py:test_run", "kernel/prog.py:bpf_stats"}
    assert expected <= sites, sorted(expected - sites)
