"""``capsule build`` and ``capsule call``: compile a wasm module or C/C++ sources to a BPF object, and call its
functions in the kernel."""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from capsule.cli.common import (
    about,
    add_build_options,
    add_c_flags,
    compile_options,
    int_arg,
    positive_int,
    progress_printer,
    read_spec,
)

if TYPE_CHECKING:
    from capsule.bpf.spec import ObjectSpec
    from capsule.compiler import Options

CALL_TRAP_STATUS = 2  # a trap is what the call returned: not an error of capsule's


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("build", help="compile C/C++ sources or a WebAssembly module to a BPF object",
                       description="Compile C/C++ sources (clang-19 to wasm32-wasi with capsule's WASI runtime, -O2 "
                                   "unless an -O is given, one object per source cached by content and compiled side "
                                   "by side) or a wasm32 module to a BPF object of regions run by capsule's "
                                   "dispatcher.")
    s.add_argument("inputs", nargs="+", metavar="SRC", help="a .wasm module, or .c/.cc/.cpp sources")
    s.add_argument("-o", "--output", help="the BPF object to write (default: the first input with .bpf.o)")
    s.add_argument("--hook", choices=("xdp", "tc"),
                   help="also build a hook entry that runs the exported packet handler on every packet (see "
                        "capsule/guest/include/capsule_hook.h and capsule attach); C sources get the hook runtime")
    add_c_flags(s)
    add_build_options(s)
    s.set_defaults(func=cmd_build)

    s = sub.add_parser("call", help="call an exported function of a module in the kernel",
                       description="Load PROGRAM (.wasm, compiled on the fly, or a .bpf.o from capsule build) into "
                                   "the kernel and call FUNCTION with integer arguments (decimal, 0x hex, negative). "
                                   "Prints each result on its own line; on a trap prints the trap and the guest "
                                   "backtrace and exits with status 2.")
    s.add_argument("program", help="a .wasm module or a .bpf.o built by capsule build")
    s.add_argument("function", help="the exported function to call")
    s.add_argument("args", nargs="*", help="integer arguments", type=int_arg)
    s.add_argument("--stats", action="store_true",
                   help="print verifier and run statistics (processed insns, load time, regions, invocations)")
    s.add_argument("--budget", type=positive_int, default=1 << 62,
                   help="region transitions per kernel invocation before PENDING (the call is continued); at "
                        "least 1")
    add_build_options(s)
    s.set_defaults(func=cmd_call)


def compile_wasm(path: Path, args: argparse.Namespace) -> ObjectSpec:
    from capsule.compiler import compile_module
    from capsule.wasm import WasmError, load

    try:
        data = path.read_bytes()
    except OSError as e:
        raise SystemExit(f"capsule: {path}: {e.strerror}") from None
    try:
        return compile_module(load(data), compile_options(args))
    except WasmError as e:
        raise SystemExit(f"capsule: {path}: {e}") from None


def build_c_object(sources: list[Path], flags: list[str], output: Path, options: Options | None = None,
                   profile: str | None = None) -> Path:
    """``capsule build`` for C/C++: sources -> wasm (with the guest runtime) -> a BPF object at ``output``."""
    from capsule.bpf.elf_write import write_object
    from capsule.compiler import compile_module
    from capsule.toolchain.guest import build_wasm
    from capsule.toolchain.progress import BuildEvent
    from capsule.wasm import load

    show = progress_printer()
    wasm = build_wasm(sources, flags, progress=show).wasm
    show(BuildEvent("lower", 0, 1, wasm.name))
    spec = compile_module(load(wasm.read_bytes()), options)
    show(BuildEvent("lower", 1, 1, wasm.name))
    write_object(mark_profile(spec, profile), output)
    return output


def object_summary(spec: ObjectSpec) -> str:
    """``N BPF instructions, F physical functions`` and, for an object split across several BPF programs, in how
    many (each program's entry function is not counted: it is the dispatcher)."""
    progs = spec.programs.values()
    insns = sum(i.slots() for p in progs for i in p.insns)
    phys = sum(len(p.func_infos) - 1 for p in progs)
    split = f" in {len(progs)} BPF programs" if len(progs) > 1 else ""
    return f"{insns} BPF instructions, {phys} physical functions{split}"


def mark_profile(spec: ObjectSpec, profile: str | None) -> ObjectSpec:
    """Name the kernel profile the object was built for, so a kernel that lacks it refuses it before loading
    (``capsule.kernel.preflight``)."""
    from capsule.kernel.profiles import PROFILE_SECTION

    if profile:
        spec.extra_sections[PROFILE_SECTION] = profile.encode()
    return spec


def cmd_build(args: argparse.Namespace) -> int:
    from capsule.bpf.elf_write import write_object
    from capsule.toolchain.guest import is_source

    srcs = [Path(p) for p in args.inputs]
    src = srcs[0]
    out = Path(args.output) if args.output else src.with_suffix(".bpf.o")
    t0 = time.perf_counter()
    if args.hook:
        from capsule.hooks.build import hook_object

        opts = compile_options(args)
        kw = {"checked": opts.checked, "may_goto": opts.may_goto, "inline": opts.inline}
        if args.fibers is not None:
            kw["fibers"] = args.fibers
        if args.stack_size is not None:
            kw["stack_size"] = args.stack_size
        with about(str(src)):
            spec = hook_object(args.hook, srcs, list(args.cflags or []), **kw)
        write_object(spec, out)
    elif any(is_source(p) for p in srcs):
        from capsule.bpf.elf import read_object
        from capsule.wasm import WasmError

        try:
            build_c_object(srcs, list(args.cflags or []), out, compile_options(args), args.profile)
        except WasmError as e:
            raise SystemExit(f"capsule: {src}: {e}") from None
        spec = read_object(out)
    elif len(srcs) > 1:
        raise SystemExit("capsule: give one .wasm module, or C/C++ sources")
    else:
        spec = mark_profile(compile_wasm(src, args), args.profile)
        write_object(spec, out)
    print(f"{out}: {object_summary(spec)}, built in {time.perf_counter() - t0:.2f} s")
    return 0


def cmd_call(args: argparse.Namespace) -> int:
    from capsule.kernel.consts import LogLevel
    from capsule.kernel.prog import bpf_stats
    from capsule.runtime import GuestTrap, Instance

    path = Path(args.program)
    spec = compile_wasm(path, args) if path.suffix == ".wasm" else read_spec(path)
    with about(str(path)):
        inst = Instance(spec, log_level=LogLevel.STATS if args.stats else 0)
    with inst:
        try:
            index = inst.export_index(args.function)
            _, results = inst.func_types(index)
            with bpf_stats():
                values = inst.call_index(index, list(args.args), budget=args.budget)
                run_time_ns = inst.run_time_ns()
        except GuestTrap as e:
            print(f"capsule: trap in {args.function}: {e.message}", file=sys.stderr)
            for name in e.backtrace:
                print(f"  in {name}", file=sys.stderr)
            return CALL_TRAP_STATUS
        for t, v in zip(results, values, strict=True):
            print(_show(t, v))
        if args.stats:
            for prog in inst.programs:
                st = prog.stats
                print(f"{prog.name}: processed insns: {st.processed_insns if st else '?'}, verification time: "
                      f"{st.verification_time_usec if st else '?'} us", file=sys.stderr)
            print(f"load time: {inst.load_seconds * 1000:.1f} ms\nregions executed: {inst.stats.transitions}\n"
                  f"invocations: {inst.stats.invocations}\nrun_time_ns: {run_time_ns}", file=sys.stderr)
    return 0


def _show(t: str, v: int) -> str:
    if t == "f32":
        return repr(struct.unpack("<f", struct.pack("<I", v & 0xFFFF_FFFF))[0])
    if t == "f64":
        return repr(struct.unpack("<d", struct.pack("<Q", v & (1 << 64) - 1))[0])
    return str(v)
