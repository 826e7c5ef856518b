"""``capsule attach``: run a packet handler (C, a wasm module, a hook object, or a Lua script) on every packet
an interface receives, on every CPU, until Ctrl-C or the end of ``--duration``.

    capsule attach xdp PROGRAM --dev IFACE [--netns NS] [--mode native|generic] [--default-verdict pass|drop]
                   [--duration S]
    capsule attach tc --lua SCRIPT.lua --dev IFACE ...

It builds (cached), loads and prepares the program, attaches it through a bpf_link, streams the handlers'
output (``[cpu N] line``), reports packets a handler did not finish (trap, budget, exit, with the guest
backtrace), prints a summary every ``--interval`` seconds and at the end (packets, verdicts, defaults and why,
ring-buffer losses, the kernel's ns per packet from bpf_stats), then detaches and releases everything.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from capsule.cli.common import about, add_c_flags, positive_int

SUMMARY_EVERY = 5.0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("attach", help="run a packet handler or a Lua script on an XDP or tc hook",
                       description="Build, load and attach PROGRAM (.c/.cc sources with a CAPSULE_HANDLER, a "
                                   ".wasm, or a .bpf.o from capsule build --hook) or, with --lua, a Lua script, "
                                   "to IFACE; stream its output and a summary until Ctrl-C or --duration.")
    s.add_argument("hook", choices=("xdp", "tc"), help="xdp, or tc (tcx ingress)")
    s.add_argument("program", nargs="?", help="the packet handler (omit with --lua)")
    s.add_argument("--dev", required=True, metavar="IFACE", help="the network interface")
    s.add_argument("--netns", metavar="NS", help="the network namespace IFACE is in (a name or a path)")
    s.add_argument("--mode", choices=("native", "generic"), help="XDP mode (default: native where the driver "
                                                                 "has it)")
    s.add_argument("--default-verdict", choices=("pass", "drop"), default="pass",
                   help="what a packet gets when its handler traps, exits or runs out of budget (default pass)")
    s.add_argument("--duration", type=float, metavar="S", help="detach after S seconds (default: at Ctrl-C)")
    s.add_argument("--lua", metavar="SCRIPT", help="run this Lua script as the handler (Lua 5.4.8)")
    s.add_argument("--budget", type=positive_int, help="region transitions and loop iterations per packet "
                                                        "(default 1048576)")
    s.add_argument("--snaplen", type=int, help="packet bytes copied for the handler (default 2048, at most "
                                               "16384)")
    s.add_argument("--heap", type=positive_int, help="bytes of heap prepared before attaching (default 16 MiB)")
    s.add_argument("--interval", type=float, default=SUMMARY_EVERY, metavar="S",
                   help=f"seconds between summaries (default {SUMMARY_EVERY:g}; 0: only at the end)")
    add_c_flags(s)
    s.set_defaults(func=cmd_attach)


def summary(st: object, elapsed: float) -> str:
    from capsule.hooks.program import HookStats

    assert isinstance(st, HookStats)
    cost = f", {st.ns_per_packet:.0f} ns/packet (bpf_stats)" if st.run_cnt else ""
    lost = f", no fiber {st.no_fiber}" if st.no_fiber else ""
    return (f"{elapsed:.1f} s: {st.packets + st.no_fiber} packets: pass {st.passed}, drop {st.dropped}, "
            f"tx {st.tx}; default verdict {st.defaulted} (budget {st.budget}, traps {st.traps}, exits "
            f"{st.exits}, bad verdicts {st.bad_verdict}){lost}; ring drops {st.ring_drops}{cost}")


def cmd_attach(args: argparse.Namespace) -> int:
    from capsule.hooks.attach import Attachment, printer
    from capsule.hooks.build import hook_object, lua_observer
    from capsule.hooks.lua import load_script
    from capsule.hooks.program import DEFAULT_BUDGET, DEFAULT_HEAP, DEFAULT_SNAPLEN, HookProgram

    if (args.program is None) == (args.lua is None):
        raise SystemExit("capsule attach: give PROGRAM, or --lua SCRIPT (not both)")
    subject = args.lua or args.program
    t0 = time.monotonic()
    with about(subject):
        if args.lua:
            if not Path(args.lua).is_file():
                raise SystemExit(f"capsule attach: {args.lua}: no such file")
            spec = lua_observer(args.hook)
        else:
            spec = hook_object(args.hook, [Path(args.program)], [f for f in args.cflags if f])
        heap = args.heap or (DEFAULT_HEAP * 2 if args.lua else DEFAULT_HEAP)
        prog = HookProgram(spec, heap=heap, budget=args.budget or DEFAULT_BUDGET,
                           snaplen=DEFAULT_SNAPLEN if args.snaplen is None else args.snaplen,
                           default_verdict=args.default_verdict)
    sink = printer()
    with prog:
        with about(subject):
            vms = load_script(prog, Path(args.lua), on_line=sink) if args.lua else None
        where = f"{args.dev}" + (f" in {args.netns}" if args.netns else "")
        with about(where):
            att = Attachment(prog, args.dev, netns=args.netns, mode=args.mode, on_line=sink,
                             on_event=lambda e: print(f"capsule: {e.message}", file=sys.stderr, flush=True))
        with att:
            if vms is not None:
                att.after_poll.append(vms.restore_broken)
            mode = f" ({args.mode})" if args.mode else ""
            print(f"capsule: {subject} attached to {where} as {args.hook}{mode} after "
                  f"{time.monotonic() - t0:.1f} s; Ctrl-C detaches", file=sys.stderr, flush=True)
            start = time.monotonic()
            end = start + args.duration if args.duration is not None else None
            next_summary = start + args.interval if args.interval > 0 else None
            try:
                while end is None or time.monotonic() < end:
                    now = time.monotonic()
                    wake = min(t for t in (end, next_summary, now + 0.2) if t is not None)
                    att.poll(max(0.0, wake - now))
                    if next_summary is not None and time.monotonic() >= next_summary:
                        print(f"capsule: {summary(att.stats(), time.monotonic() - start)}", file=sys.stderr,
                              flush=True)
                        next_summary += args.interval
            except KeyboardInterrupt:
                pass
            final = att.stats()
        print(f"capsule: detached; {summary(final, time.monotonic() - start)}", file=sys.stderr, flush=True)
    return 0
