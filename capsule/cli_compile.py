"""``capsule build`` and ``capsule call``: compile a wasm module to a BPF object, and call its functions in the
kernel."""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

C_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".C")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("build", help="compile C/C++ sources or a WebAssembly module to a BPF object",
                       description="Compile C/C++ sources (clang-19 to wasm32-wasi with capsule's WASI runtime) or a "
                                   "wasm32 module to a BPF object of regions run by capsule's dispatcher.")
    s.add_argument("inputs", nargs="+", metavar="SRC", help="a .wasm module, or .c/.cc/.cpp sources")
    s.add_argument("-o", "--output", help="the BPF object to write (default: the first input with .bpf.o)")
    add_c_flags(s)
    _build_options(s)
    s.set_defaults(func=cmd_build)

    s = sub.add_parser("call", help="call an exported function of a module in the kernel",
                       description="Load PROGRAM (.wasm, compiled on the fly, or a .bpf.o from capsule build) into "
                                   "the kernel and call FUNCTION with integer arguments (decimal, 0x hex, negative). "
                                   "Prints each result on its own line; on a trap prints the trap and the guest "
                                   "backtrace and exits with status 2.")
    s.add_argument("program", help="a .wasm module or a .bpf.o built by capsule build")
    s.add_argument("function", help="the exported function to call")
    s.add_argument("args", nargs="*", help="integer arguments", type=_int_arg)
    s.add_argument("--stats", action="store_true",
                   help="print verifier and run statistics (processed insns, load time, regions, invocations)")
    s.add_argument("--budget", type=int, default=1 << 62,
                   help="region transitions per kernel invocation before PENDING (the call is continued)")
    _build_options(s)
    s.set_defaults(func=cmd_call)


def add_c_flags(s: argparse.ArgumentParser) -> None:
    """-I/-D/-O/-l (and --cflag for anything else) collected in ``args.cflags`` for clang."""
    c = s.add_argument_group("C/C++ build flags (passed to clang)")
    c.add_argument("-I", dest="cflags", action="append", type=lambda v: "-I" + v, default=[], metavar="DIR")
    c.add_argument("-D", dest="cflags", action="append", type=lambda v: "-D" + v, metavar="NAME[=VALUE]")
    c.add_argument("-O", dest="cflags", action="append", type=lambda v: "-O" + v, metavar="LEVEL")
    c.add_argument("-l", dest="cflags", action="append", type=lambda v: "-l" + v, metavar="LIB")
    c.add_argument("--cflag", dest="cflags", action="append", metavar="FLAG", help="any other clang flag")


def _build_options(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("code generation (for .wasm input)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--checked", dest="checked", action="store_true", default=True,
                      help="bounds-check memory accesses, trapping as the wasm spec says (default)")
    mode.add_argument("--fast", dest="checked", action="store_false",
                      help="no bounds checks: accesses past committed memory read 0 and drop stores")
    g.add_argument("--no-may-goto", dest="may_goto", action="store_false",
                   help="the profile for kernels without may_goto: every loop back-edge returns to the dispatcher")
    g.add_argument("--no-inline", dest="inline", action="store_false",
                   help="do not replace calls to small functions by their bodies")
    g.add_argument("--fibers", type=int, default=None, help="number of fibers (default 4)")
    g.add_argument("--stack-size", type=_int_arg, default=None,
                   help="software stack per fiber in bytes, a power of two (default 16 MiB)")


def _int_arg(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r} (use decimal, 0x hex, or a minus sign)") from None


def _options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from capsule.compiler import Options

    kw = {"checked": args.checked, "may_goto": args.may_goto, "inline": args.inline}
    if args.fibers is not None:
        kw["fibers"] = args.fibers
    if args.stack_size is not None:
        kw["stack_size"] = args.stack_size
    try:
        return Options(**kw)
    except ValueError as e:
        raise SystemExit(f"capsule: {e}") from None


def compile_wasm(path: Path, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from capsule.compiler import compile_module
    from capsule.wasm import WasmError, load

    try:
        data = path.read_bytes()
    except OSError as e:
        raise SystemExit(f"capsule: {path}: {e.strerror}") from None
    try:
        return compile_module(load(data), _options(args))
    except WasmError as e:
        raise SystemExit(f"capsule: {path}: {e}") from None


def cmd_build(args: argparse.Namespace) -> int:
    from capsule.bpf.elf_write import write_object

    srcs = [Path(p) for p in args.inputs]
    src = srcs[0]
    out = Path(args.output) if args.output else src.with_suffix(".bpf.o")
    t0 = time.perf_counter()
    if any(p.suffix in C_SUFFIXES for p in srcs):
        from capsule.bpf.elf import read_object
        from capsule.cli_run import build_c_object
        from capsule.wasm import WasmError

        try:
            build_c_object(srcs, list(args.cflags or []), out, _options(args))
        except WasmError as e:
            raise SystemExit(f"capsule: {src}: {e}") from None
        spec = read_object(out)
    elif len(srcs) > 1:
        raise SystemExit("capsule: give one .wasm module, or C/C++ sources")
    else:
        spec = compile_wasm(src, args)
        write_object(spec, out)
    prog = spec.programs["capsule_run"]
    print(f"{out}: {sum(i.slots() for i in prog.insns)} BPF instructions, {len(prog.func_infos) - 1} physical "
          f"functions, built in {time.perf_counter() - t0:.2f} s")
    return 0


def cmd_call(args: argparse.Namespace) -> int:
    from capsule.bpf.elf import ObjectError, read_object
    from capsule.kernel.consts import LogLevel
    from capsule.kernel.prog import bpf_stats
    from capsule.runtime import CallError, GuestRejected, GuestTrap, Instance

    path = Path(args.program)
    if path.suffix == ".wasm":
        spec = compile_wasm(path, args)
    else:
        try:
            spec = read_object(path)
        except ObjectError as e:
            raise SystemExit(f"capsule: {e}") from None
    try:
        inst = Instance(spec, log_level=LogLevel.STATS if args.stats else 0)
    except (CallError, GuestRejected, GuestTrap) as e:
        print(f"capsule: {path}: {e}", file=sys.stderr)
        return 1
    with inst:
        try:
            index = inst.export_index(args.function)
            _, results = inst.func_types(index)
            with bpf_stats():
                values = inst.call_index(index, list(args.args), budget=args.budget)
                info = inst.prog.info()
        except GuestTrap as e:
            print(f"capsule: trap in {args.function}: {e.message}", file=sys.stderr)
            for name in e.backtrace:
                print(f"  in {name}", file=sys.stderr)
            return 2
        except CallError as e:
            print(f"capsule: {e}", file=sys.stderr)
            return 1
        for t, v in zip(results, values, strict=True):
            print(_show(t, v))
        if args.stats:
            st = inst.prog.stats
            print(f"processed insns: {st.processed_insns}\nverification time: {st.verification_time_usec} us\n"
                  f"load time: {inst.load_seconds * 1000:.1f} ms\nregions executed: {inst.stats.transitions}\n"
                  f"invocations: {inst.stats.invocations}\nrun_time_ns: {info.run_time_ns}", file=sys.stderr)
    return 0


def _show(t: str, v: int) -> str:
    if t == "f32":
        return repr(struct.unpack("<f", struct.pack("<I", v & 0xFFFF_FFFF))[0])
    if t == "f64":
        return repr(struct.unpack("<d", struct.pack("<Q", v & (1 << 64) - 1))[0])
    return str(v)
