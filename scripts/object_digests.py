#!/usr/bin/env python3
"""Digests of compiled objects, to prove that a refactoring leaves the compiler's output byte-identical.

Compiles every wasm module the test suite has cached (the spec suite's modules, the differential programs,
the C/C++ test programs, zlib and Lua) with the default options, and the differential programs also with
fast memory and without may_goto; and runs the optimizer (unchecked) and the disassembler over every clang-built
test object. Prints one JSON object: input digest (+ variant) -> output digest (or the error class when an
input does not compile). Run it before and after a change and compare the two files:

    python scripts/object_digests.py > before.json
    ... change ...
    python scripts/object_digests.py --compare before.json

With ``--compare FILE`` it prints every input whose output differs from FILE's (inputs only one side has are
counted, not compared) and exits 1 if any does.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP))
from capsule.toolchain.cache import cache_dir  # noqa: E402 (this checkout's capsule, found through TOP)

ROOTS = [TOP / ".cache" / "wast", TOP / ".cache" / "tests", cache_dir("build")]
VARIANTS = {"default": {}, "fast": {"checked": False}, "no-may-goto": {"may_goto": False}}


def _digest(job: tuple[str, str]) -> tuple[str, str]:
    path, variant = job
    sys.path.insert(0, str(TOP))
    from capsule.bpf.elf_write import object_bytes
    from capsule.compiler import Options, compile_module
    from capsule.wasm import load

    data = Path(path).read_bytes()
    key = hashlib.sha256(data).hexdigest()[:20] + ":" + variant
    try:
        spec = compile_module(load(data), Options(**VARIANTS[variant]))  # type: ignore[arg-type]
        out = hashlib.sha256(object_bytes(spec)).hexdigest()[:20]
    except Exception as e:  # noqa: BLE001 - the error's class is part of the output being compared
        out = "error:" + type(e).__name__
    return key, out


def _opt_digest(path: str) -> tuple[str, str]:
    sys.path.insert(0, str(TOP))
    from capsule.bpf.disasm import disassemble
    from capsule.bpf.elf import read_object
    from capsule.bpf.elf_write import object_bytes
    from capsule.opt.pipeline import make_passes, optimize_object

    data = Path(path).read_bytes()
    key = hashlib.sha256(data).hexdigest()[:20] + ":opt"
    try:
        spec = read_object(Path(path))
        text = "\n".join("\n".join(disassemble(ps.insns)) for ps in spec.programs.values())
        result = optimize_object(spec, make_passes())
        out = hashlib.sha256(object_bytes(result.spec) + text.encode()).hexdigest()[:20]
    except Exception as e:  # noqa: BLE001
        out = "error:" + type(e).__name__
    return key, out


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", metavar="FILE", help="compare with an earlier run's output instead of printing")
    args = ap.parse_args(argv)
    jobs: list[tuple[str, str]] = []
    for root in ROOTS:
        for p in sorted(root.rglob("*.wasm")):
            jobs.append((str(p), "default"))
            if "diff" in p.parts:
                jobs += [(str(p), "fast"), (str(p), "no-may-goto")]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        result = dict(pool.map(_digest, jobs, chunksize=8))
        objects = sorted(str(p) for p in (TOP / ".cache" / "tests").glob("*.o"))
        result.update(pool.map(_opt_digest, objects))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        common = sorted(set(before) & set(result))
        changed = [k for k in common if before[k] != result[k]]
        for k in changed:
            print(f"{k}: {before[k]} -> {result[k]}")
        print(f"{len(common)} compared, {len(changed)} differ; {len(set(result) - set(before))} new inputs, "
              f"{len(set(before) - set(result))} missing")
        return 1 if changed else 0
    json.dump(dict(sorted(result.items())), sys.stdout, indent=0)
    print()
    print(f"{len(result)} objects", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
