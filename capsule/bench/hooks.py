"""``capsule bench hooks``: what one packet costs on an XDP hook, for the same parsing work done by

(a) a clang-19 BPF program written by hand (``hook_programs/parse.bpf.c``),
(b) capsule's C handler (``hook_programs/parse.c``; and the example flow handler, ``examples/packet_flows.c``,
    which also keeps a malloc'd hash table of flows),
(c) the Lua observer parsing only (``examples/lua_count.lua``, no output),
(d) the Lua observer printing a line per packet (``examples/lua_flows.lua`` with ``EVERY_PACKET``),

beside the BPF Capsule article's figures (an i7-12700K; its Lua observer on live traffic).

Two numbers per row: ns per packet from BPF_PROG_TEST_RUN with a repeat count (the kernel's own average over
the repeats, the best of several rounds), and ns per packet from bpf_stats (``run_time_ns / run_cnt``) while
native XDP on a veth pair in namespaces of our own sees live frames sent from the other end, with the packets
per second the sender reached (a Python raw socket on one CPU: a bound on the rate, not the hook's limit).
The frame is an IPv4 TCP SYN with the usual options (MSS, SACK, timestamps, window scale: 74 bytes).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from capsule.bpf.elf import read_object
from capsule.compiler import hook_abi as h
from capsule.hooks import packets as P
from capsule.hooks.attach import Attachment
from capsule.hooks.build import LUA_UNITY, hook_object, lua_observer
from capsule.hooks.lua import load_script
from capsule.hooks.netns import VethPair
from capsule.hooks.program import HookProgram
from capsule.hooks.ring import Stream
from capsule.kernel.collection import Collection
from capsule.kernel.consts import XDPFlags
from capsule.kernel.link import Link, run_in_netns
from capsule.kernel.prog import Program, ProgramInfo, bpf_stats
from capsule.kernel.ringbuf import RingBuffer
from capsule.sources import lua as lua_recipe
from capsule.toolchain.cache import cache_dir
from capsule.toolchain.clang import ToolchainError, compile_bpf
from capsule.toolchain.guest import GUEST_DIR
from capsule.toolchain.native import build_native

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "hook_programs"
EXAMPLES = HERE.parent / "examples"
# the article's figures, ns per packet (Lua observer parsing only / printing, CPython), on live traffic
ARTICLE = {"Lua, parse only (article)": 5800.0, "Lua, printing (article)": 16700.0, "CPython (article)": 30800.0}
PRINT_BATCH = 64  # repeats per test run of a printing handler, the ring drained between runs


@dataclass
class Row:
    name: str
    test_run_ns: float
    live_ns: float
    live_pps: float


def frame(macs: tuple[bytes, bytes] = (b"\x02" * 6, b"\x04" * 6)) -> bytes:
    a, b = "10.199.0.2", "10.199.0.1"
    return P.ether(*macs, P.ETH_IP4, P.ipv4(a, b, P.TCP, P.tcp(a, b, 40000, 80, options=P.tcp_options())))


def _best_test_run(prog: Program, data: bytes, repeat: int, rounds: int, drain: Callable[[], object]) -> float:
    """The kernel's mean ns per run of ``repeat`` runs, the best of ``rounds`` (median of batches when the
    ring must be drained between them)."""
    if drain is _nothing:
        return float(min(prog.test_run(data, repeat=repeat).duration_ns for _ in range(rounds)))
    per: list[float] = []
    for _ in range(max(1, repeat * rounds // PRINT_BATCH)):
        per.append(prog.test_run(data, repeat=PRINT_BATCH).duration_ns)
        drain()
    return statistics.median(per)


def _nothing() -> None:
    return None


def _send(v: VethPair, packets: int) -> float:
    """Send ``packets`` copies of the frame from CPU 0 of the far end; packets per second sent."""
    frames = [frame((v.mac_a, v.mac_b))] * packets
    t0 = time.perf_counter()
    v.send(frames, cpu=0)
    elapsed = time.perf_counter() - t0
    time.sleep(0.2)  # the last frames reach the hook
    return packets / elapsed


def _per_run(prog: Program, before: ProgramInfo) -> float:
    info = prog.info()
    runs = info.run_cnt - before.run_cnt
    return (info.run_time_ns - before.run_time_ns) / runs if runs else 0.0


def bench_bpf(repeat: int, rounds: int, packets: int) -> Row:
    """(a): the hand-written program, compiled by clang-19 and loaded by capsule's loader."""
    root = cache_dir("bench-hooks")
    root.mkdir(parents=True, exist_ok=True)
    obj = compile_bpf(PROGRAMS / "parse.bpf.c", root / "parse.bpf.o")
    with Collection.load(read_object(obj)) as coll:
        prog = coll.programs["parse"]
        tr = _best_test_run(prog, frame(), repeat, rounds, _nothing)
        with VethPair() as v, bpf_stats():
            link = run_in_netns(v.path(v.ns_a),
                                lambda: Link.xdp(prog, socket.if_nametoindex(v.dev_a), XDPFlags.DRV_MODE))
            try:
                before = prog.info()
                pps = _send(v, packets)
                live = _per_run(prog, before)
            finally:
                link.detach()
                link.close()
    return Row("(a) clang-19 BPF, by hand", tr, live, pps)


def bench_hook(name: str, hp: HookProgram, repeat: int, rounds: int, packets: int, *, prints: bool = False) -> Row:
    """(b)-(d): a prepared hook program, test-run and then attached (native XDP) on live frames."""
    with RingBuffer(hp.inst.coll.maps[h.RING_MAP]) as ring:
        stream = Stream(ring, hp.inst.meta, lambda f, fd, s: None)
        tr = _best_test_run(hp.prog, frame(), repeat, rounds, stream.drain if prints else _nothing)
        stream.drain()
    defaulted = hp.stats().defaulted
    with VethPair() as v, bpf_stats():
        with Attachment(hp, v.dev_a, netns=v.ns_a, mode="native", stats=False, on_line=lambda f, fd, s: None) as att:
            att.start()
            before = hp.prog.info()
            pps = _send(v, packets)
            live = _per_run(hp.prog, before)
    if hp.stats().defaulted != defaulted:
        raise RuntimeError(f"{name}: packets got the default verdict (the handler failed): {hp.stats()}")
    return Row(name, tr, live, pps)


def bench_lua_native(script: str, packets: int) -> Row | None:
    """The Lua observer's glue and Lua itself built natively (gcc -m32: the glue keeps heap addresses in 32
    bits, as in the guest) and fed the same frame in a loop (``hook_programs/lua_native.c``): CPU ns per
    packet, in the test-run column. None when gcc cannot build 32-bit programs here."""
    root = cache_dir("bench-hooks")
    root.mkdir(parents=True, exist_ok=True)
    tree = lua_recipe.fetch()
    try:
        exe = build_native([tree / lua_recipe.SHIM, LUA_UNITY, LUA_UNITY.parent / "heap.c", PROGRAMS / "lua_native.c"],
                           root / "lua_native", ["-m32", *lua_recipe.LUA_CFLAGS, f"-I{tree}",
                                                 f"-I{GUEST_DIR / 'include'}", f"-I{LUA_UNITY.parent}"])
    except ToolchainError:
        return None
    (root / "script.lua").write_text(script)
    (root / "frame.bin").write_bytes(frame())
    out = subprocess.run([str(exe), str(root / "script.lua"), str(root / "frame.bin"), str(packets)],
                         capture_output=True, text=True, check=True).stdout
    ns = float(out.split("ns_per_packet")[-1])
    return Row("(c) the same Lua and glue, gcc -m32 natively", ns, 0.0, 0.0)


def run(repeat: int = 20000, rounds: int = 5, packets: int = 20000, lua: bool = True) -> list[Row]:
    rows = [bench_bpf(repeat, rounds, packets)]
    with HookProgram(hook_object("xdp", [PROGRAMS / "parse.c"])) as hp:
        rows.append(bench_hook("(b) capsule C handler", hp, repeat, rounds, packets))
    with HookProgram(hook_object("xdp", [EXAMPLES / "packet_flows.c"])) as hp:
        hp.write("print_flows", 0)
        rows.append(bench_hook("(b) capsule example flow handler", hp, repeat, rounds, packets))
    if lua:
        parse_only = (EXAMPLES / "lua_count.lua").read_text() + "\nREPORT_EVERY = 0\n"
        with HookProgram(lua_observer("xdp"), heap=48 << 20) as hp:
            load_script(hp, parse_only)
            rows.append(bench_hook("(c) Lua observer, parse only", hp, repeat, rounds, packets))
            native = bench_lua_native(parse_only, 10 * repeat)
            if native is not None:
                rows.append(native)
            load_script(hp, (EXAMPLES / "lua_flows.lua").read_text() + "\nEVERY_PACKET = true\n")
            rows.append(bench_hook("(d) Lua observer, a line per packet", hp, repeat // 10, rounds, packets // 4,
                                   prints=True))
    return rows


# -- output ---------------------------------------------------------------------------------------------------
def table(rows: list[Row]) -> str:
    base = rows[0].test_run_ns or 1.0
    out = [f"{'variant':40} {'test run ns':>12} {'x (a)':>7} {'live ns':>9} {'live pps':>10}"]
    for r in rows:
        out.append(f"{r.name:40} {r.test_run_ns:12.0f} {r.test_run_ns / base:7.1f} {r.live_ns:9.0f} "
                   f"{r.live_pps:10.0f}")
    for name, ns in ARTICLE.items():
        out.append(f"{name:40} {'':12} {'':7} {ns:9.0f} {'':10}")
    return "\n".join(out)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.name for r in rows] + list(ARTICLE)
    test_run = [r.test_run_ns for r in rows] + [0.0] * len(ARTICLE)
    live = [r.live_ns for r in rows] + list(ARTICLE.values())
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ys = range(len(names))
    ax.barh([y - 0.2 for y in ys], test_run, height=0.4, label="BPF_PROG_TEST_RUN (repeat)")
    ax.barh([y + 0.2 for y in ys], live, height=0.4, label="live, native XDP on veth (bpf_stats)")
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ns per packet (log scale)")
    ax.set_title("One packet on an XDP hook: the same parsing work")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_parser(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``bench hooks`` in the ``bench`` group (``capsule.cli.bench``)."""
    p = bench.add_parser("hooks", help="ns per packet on an XDP hook: hand-written BPF, capsule C, Lua",
                         description="Measure one packet's cost on an XDP hook for the same parsing work in a "
                                     "hand-written clang BPF program, capsule's C handler and the Lua observer "
                                     "(parsing only, and printing a line per packet): BPF_PROG_TEST_RUN with a "
                                     "repeat count, and bpf_stats on live frames over a veth pair in namespaces "
                                     "of its own.")
    p.add_argument("--repeat", type=int, default=20000, help="test-run repeats per round (default 20000)")
    p.add_argument("--rounds", type=int, default=5, help="test-run rounds, the best kept (default 5)")
    p.add_argument("--packets", type=int, default=20000, help="live frames per variant (default 20000)")
    p.add_argument("--no-lua", action="store_true", help="leave out the Lua observer (its load takes ~1.5 min)")
    p.add_argument("--plot", type=Path, metavar="PNG", help="also draw the table as a bar chart")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.set_defaults(func=cmd_hooks)
    return p


def cmd_hooks(args: argparse.Namespace) -> int:
    for name in ("repeat", "rounds", "packets"):
        if getattr(args, name) < 1:
            raise SystemExit(f"capsule bench hooks: --{name} must be at least 1")
    rows = run(args.repeat, args.rounds, args.packets, lua=not args.no_lua)
    print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else table(rows))
    if args.plot:
        plot(rows, args.plot)
    return 0
