"""Count candidate waste patterns left in the corpus's programs after the optimizer's pipeline.

Usage: ``.venv/bin/python scripts/opt_waste.py [--limit N] [--suite S] [--passes a,b,...] [--max-insns N]``

Every program of the corpus (``capsule bench opt``'s objects, at most ``--limit`` objects per suite) is run
through the pipeline without the kernel checker (``capsule opt --no-check``), then its final code is scanned for
the patterns below. Each pattern reports its occurrences and the instruction slots rewriting it would save (an
estimate: patterns overlap, and a pattern found here may still be unsafe for the verifier in a given case).
The scans are block-local and conservative: they stand for what a pass could remove, not for a proof.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from capsule.bpf.opcodes import Alu, Class, Jmp, Mode, Src
from capsule.opt.analysis import Analysis
from capsule.opt.effects import CALL, EXIT, JUMPS
from capsule.opt.pipeline import make_passes, optimize_program
from capsule.opt.rewrite import Code
from capsule.opt.values import Kind

MOV64_X = Class.ALU64 | Alu.MOV | Src.X
MOV32_X = Class.ALU | Alu.MOV | Src.X
MOV_K = (Class.ALU64 | Alu.MOV | Src.K, Class.ALU | Alu.MOV | Src.K)
ADD64_K = Class.ALU64 | Alu.ADD | Src.K
LSH64_K = Class.ALU64 | Alu.LSH | Src.K
RSH64_K = Class.ALU64 | Alu.RSH | Src.K
JA = Class.JMP | Jmp.JA
M32 = (1 << 32) - 1
UPPER = ((1 << 64) - 1) ^ M32

Found = list[int]  # slots saved per occurrence


def _blocks(a: Analysis):
    for fn in a.cfg.functions.values():
        for bs in fn.reachable():
            yield fn.blocks[bs]


def _plain_read(ins, reg: int) -> bool:
    """Whether ``ins`` reads ``reg`` only through an explicit operand that another register could stand in for
    (not as an implicit call/exit argument, not as the destination it also writes)."""
    c = ins.code
    cls = c & 7
    if c == CALL or c == EXIT or cls == Class.LD:
        return False
    if cls in (Class.ALU, Class.ALU64):
        return ins.dst != reg and bool(c & Src.X)
    if cls == Class.STX and c & 0xE0 == Mode.ATOMIC:
        return False
    return True  # loads (base), stores (base, value), jumps (operands)


def copy_forward(a: Analysis) -> Found:
    """``rX = rY`` whose value is read only by later instructions of its block that could read ``rY``
    instead, with ``rY`` unchanged until the last of them and ``rX`` dead after."""
    insns, effs, out = a.code.insns, a.effects, []
    for b in _blocks(a):
        for i in range(b.start, b.end):
            ins = insns[i]
            if ins.code != MOV64_X or ins.off or ins.dst == ins.src or ins.dst == 10:
                continue
            x, y = ins.dst, ins.src
            ok, ended = True, False
            for m in range(i + 1, b.end):
                e = effs[m]
                if e.uses >> x & 1:
                    if not _plain_read(insns[m], x) or (y == 10 and insns[m].code & 7 not in
                                                        (Class.LDX, Class.ST, Class.STX)):
                        ok = False
                        break
                if e.defs >> x & 1:
                    ended = True
                    break
                if e.defs >> y & 1:
                    # rY changes: fine only when rX is no longer read afterwards
                    if a.live.live_out[m] >> x & 1:
                        ok = False
                        break
                    ended = True
                    break
            if ok and (ended or not a.live.live_out[b.end - 1] >> x & 1):
                out.append(1)
    return out


def copy_backward(a: Analysis) -> Found:
    """``rX = <def>; ...; rY = rX`` with the mov the only reader of that value and ``rY`` neither read nor
    written in between: the definition could write ``rY`` directly."""
    insns, effs, out = a.code.insns, a.effects, []
    loc = a.local
    for b in _blocks(a):
        for i in range(b.start, b.end):
            ins = insns[i]
            if ins.code != MOV64_X or ins.off or ins.dst == ins.src or ins.src == 10:
                continue
            x, y = ins.src, ins.dst
            d = loc.def_before(i, x)
            if d is None or d < 0:
                continue
            dins = insns[d]
            dc = dins.code
            if not (dc & 7 in (Class.ALU, Class.ALU64, Class.LDX) or dc == 0x18) or dins.dst != x:
                continue
            if effs[d].uses >> x & 1:
                continue  # reads rX (ALU ops on it): would need rY = rX first
            if not loc.uses_within(d, x, {i}):
                continue
            if any(effs[m].uses >> y & 1 or effs[m].defs >> y & 1 for m in range(d + 1, i)):
                continue
            out.append(1)
    return out


def redundant_loads(a: Analysis) -> Found:
    """A load of the same bytes (same base value, offset, size) as an earlier load of the block whose register
    still holds them, with no store or call between: 1 slot when it is the same register, else 0 (a mov)."""
    insns, effs, out = a.code.insns, a.effects, []
    loc = a.local
    for b in _blocks(a):
        seen: dict[tuple, tuple[int, int]] = {}  # (base value id, base reg?, off, code) -> (reg, index)
        for i in range(b.start, b.end):
            ins = insns[i]
            e = effs[i]
            if e.store or e.call:
                seen.clear()
            if ins.code & 7 == Class.LDX and ins.code & 0xE0 in (Mode.MEM, Mode.MEMSX):
                key = (loc.value_id(i, ins.src), ins.src, ins.off, ins.code)
                prev = seen.get(key)
                if prev is not None and loc.value_id(i, prev[0]) == ("def", prev[1], 0):
                    out.append(1 if prev[0] == ins.dst else 0)
                if ins.dst != ins.src:
                    seen[key] = (ins.dst, i)
    return out


def spill_refill(a: Analysis) -> Found:
    """``*(u64 *)(r10 + o) = rS; ...; rX = *(u64 *)(r10 + o)`` in one block with nothing stored or called
    between and ``rS`` unchanged: 1 slot when rX is rS (the refill goes), else 0 (it becomes a mov)."""
    insns, effs, out = a.code.insns, a.effects, []
    loc = a.local
    for b in _blocks(a):
        slot: dict[int, tuple[int, int]] = {}
        for i in range(b.start, b.end):
            ins = insns[i]
            c = ins.code
            if c == Class.LDX | Mode.MEM | 0x18 and ins.src == 10 and ins.off in slot:
                r, at = slot[ins.off]
                if loc.value_id(i, r) == loc.value_id(at, r):
                    out.append(1 if r == ins.dst else 0)
                continue
            if effs[i].store or effs[i].call:
                slot.clear()
                if c == Class.STX | Mode.MEM | 0x18 and ins.dst == 10 and ins.src != 10:
                    slot[ins.off] = (ins.src, i)
    return out


def stack_addr_remat(a: Analysis) -> Found:
    """``rX = r10; rX += K`` while another register already holds ``fp + K``: ``rX = rZ`` saves a slot (two when
    rX itself holds it)."""
    insns, out = a.code.insns, []
    before = a.values.before
    for b in _blocks(a):
        for i in range(b.start, b.end - 1):
            ins, nxt = insns[i], insns[i + 1]
            if ins.code != MOV64_X or ins.src != 10 or ins.off or nxt.code != ADD64_K or nxt.dst != ins.dst:
                continue
            st = before[i]
            if st is None:
                continue
            for r in range(10):
                v = st.regs[r]
                if v.kind == Kind.STACK and v.const_offset == nxt.imm:
                    out.append(2 if r == ins.dst else 1)
                    break
    return out


def jumps_wasted(a: Analysis) -> Found:
    """Jumps to the next instruction, and jumps to a ``goto`` (threading)."""
    insns, t, out = a.code.insns, a.code.targets, []
    for i, ins in enumerate(insns):
        if ins.code in JUMPS and a.values.before[i] is not None:
            if t.get(i) == i + 1 and ins.code & 0xF0 != Jmp.JCOND:
                out.append(1)
            elif t.get(i) is not None and insns[t[i]].code == JA:
                out.append(0)
    return out


def _merged(a: Analysis, goto: bool) -> int:
    from capsule.opt.passes.tailmerge import TailMerge

    new, n = TailMerge(goto=goto).run(a.code, a.prog_type)
    return a.code.slots() - new.slots() if n else 0


def duplicated_runs(a: Analysis) -> Found:
    """Identical runs of code ending in the same ``exit`` or ``goto``, one of which nothing falls into (what
    the ``tailmerge`` pass removes): the slots that pass removes from this code."""
    saved = _merged(a, goto=False)
    return [saved] if saved else []


def duplicated_runs_goto(a: Analysis) -> Found:
    """The same, counting also runs entered by falling through (a ``goto`` replaces them: one slot less saved,
    one more instruction for the verifier on that path): what ``TailMerge(goto=True)`` adds."""
    saved = _merged(a, goto=True) - _merged(a, goto=False)
    return [saved] if saved > 0 else []


def store_back(a: Analysis) -> Found:
    """``rX = *(size *)(rB + o); ...; *(size *)(rB + o) = rX`` in one block, nothing stored or called between,
    rB and rX unchanged: the store writes what is already there."""
    insns, effs, out = a.code.insns, a.effects, []
    loc = a.local
    for b in _blocks(a):
        loaded: dict[tuple, tuple[int, int]] = {}  # (base value id, off, size) -> (reg, load index)
        for i in range(b.start, b.end):
            ins = insns[i]
            c = ins.code
            if c & 7 == Class.STX and c & 0xE0 == Mode.MEM:
                key = (loc.value_id(i, ins.dst), ins.off, c & 0x18)
                got = loaded.get(key)
                if got is not None and got[0] == ins.src and loc.value_id(i, ins.src) == ("def", got[1], 0):
                    out.append(1)
            if effs[i].store or effs[i].call:
                loaded.clear()
            if c & 7 == Class.LDX and c & 0xE0 == Mode.MEM and ins.dst != ins.src:
                loaded[(loc.value_id(i, ins.src), ins.off, c & 0x18)] = (ins.dst, i)
    return out


def ld_imm64_held(a: Analysis) -> Found:
    """``ld_imm64`` (two slots) of a map, a map value address or a constant that another register already
    holds, by the value analysis: ``rX = rY`` is one slot. (An upper bound: the value analysis does not tell a
    global-data address from a lookup result in the same map; the ``reuse`` pass tracks how values were made.)"""
    insns, out = a.code.insns, []
    for i, ins in enumerate(insns):
        st = a.values.before[i]
        if st is None or ins.code != 0x18 or i in a.code.targets:
            continue
        after = a.values.before[i + 1] if i + 1 < len(insns) else None
        if after is None:
            continue
        v = after.regs[ins.dst]
        if v.kind == Kind.TOP or (v.kind != Kind.SCALAR and v.const_offset is None) or \
                (v.kind == Kind.SCALAR and not v.is_const):
            continue
        if any(r != ins.dst and st.regs[r] == v for r in range(10)):
            out.append(1)
    return out


def redundant_mov_k(a: Analysis) -> Found:
    insns, out = a.code.insns, []
    for i, ins in enumerate(insns):
        st = a.values.before[i]
        if st is None or ins.code not in MOV_K or ins.off:
            continue
        v = st.regs[ins.dst]
        want = (ins.imm & M32) if ins.code & 7 == Class.ALU else ins.imm & ((1 << 64) - 1)
        if v.is_const and v.tn.value == want:
            out.append(1)
    return out


def zext_left(a: Analysis) -> Found:
    """``wX = wX`` with the upper half already zero, and ``lsh 32; rsh 32`` pairs."""
    insns, out = a.code.insns, []
    for i, ins in enumerate(insns):
        st = a.values.before[i]
        if st is None:
            continue
        if ins.code == MOV32_X and ins.dst == ins.src and not ins.off:
            v = st.regs[ins.dst]
            if v.kind == Kind.SCALAR and v.tn.known_zero(UPPER):
                out.append(1)
        elif ins.code == LSH64_K and ins.imm == 32 and i + 1 < len(insns) and insns[i + 1].code == RSH64_K \
                and insns[i + 1].imm == 32 and insns[i + 1].dst == ins.dst:
            out.append(1)
    return out


def dead_left(a: Analysis) -> Found:
    """Faint instructions and dead stack stores that remain."""
    out = [1 for i in a.faint if a.values.before[i] is not None]
    insns = a.code.insns
    for i, ins in enumerate(insns):
        if a.values.before[i] is not None and ins.code & 7 in (Class.ST, Class.STX) and ins.code & 0xE0 == Mode.MEM \
                and a.stack.store_dead(a.cfg, i):
            out.append(1)
    return out


PATTERNS: dict[str, Callable[[Analysis], Found]] = {
    "copy forward (rX = rY; reads of rX -> rY)": copy_forward,
    "copy backward (def rX; rY = rX -> def rY)": copy_backward,
    "redundant load (same bytes, no store between)": redundant_loads,
    "spill then refill in one block": spill_refill,
    "stack address recomputed (r = r10; r += K)": stack_addr_remat,
    "jump to next / to a goto": jumps_wasted,
    "duplicated runs ending in exit / goto L": duplicated_runs,
    "  same, entered by falling through (+goto)": duplicated_runs_goto,
    "store of the value just loaded from there": store_back,
    "mov K already in the register": redundant_mov_k,
    "ld_imm64 of a value another register holds": ld_imm64_held,
    "zero extension left (wX = wX, lsh/rsh 32)": zext_left,
    "dead code / dead stack stores left": dead_left,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=40, help="at most N objects per suite (default 40)")
    ap.add_argument("--suite", action="append")
    ap.add_argument("--passes", help="comma-separated pipeline (default: the default pipeline)")
    ap.add_argument("--max-insns", type=int, default=4000)
    args = ap.parse_args(argv)

    from capsule.bench.opt import as_loaded
    from capsule.bench.opt_corpus import build_corpus
    from capsule.bpf.elf import ObjectError, read_object

    names = args.passes.split(",") if args.passes else None
    t0 = time.perf_counter()
    taken: Counter[str] = Counter()
    occ: Counter[str] = Counter()
    saved: Counter[str] = Counter()
    progs_with: Counter[str] = Counter()
    ni_total = ni_orig = nprogs = errors = 0
    for o in build_corpus(args.suite).built(args.suite):  # as `capsule bench opt` finds it (cached builds)
        if taken[o.suite] >= args.limit:
            continue
        taken[o.suite] += 1
        try:
            spec = as_loaded(read_object(Path(o.path)))
        except (ObjectError, OSError):
            continue
        for ps in spec.programs.items():
            ps = ps[1]
            if len(ps.insns) > args.max_insns:
                continue
            try:
                res = optimize_program(ps, make_passes(names), None)
                code = Code.from_program(res.optimized)
            except Exception:
                errors += 1
                continue
            nprogs += 1
            ni_orig += res.ni_before
            ni_total += res.ni_after
            a = Analysis.of(code, ps.type)
            for name, fn in PATTERNS.items():
                found = fn(a)
                occ[name] += len(found)
                saved[name] += sum(found)
                progs_with[name] += bool(found)
    dt = time.perf_counter() - t0
    print(f"{nprogs} programs ({', '.join(f'{s}: {n} objects' for s, n in taken.items())}), "
          f"NI {ni_orig} -> {ni_total} after the pipeline; {errors} optimizer errors; {dt:.1f} s")
    w = max(len(n) for n in PATTERNS)
    print(f"| {'pattern':{w}} | occurrences | programs | slots saved | % of NI |")
    print(f"|{'-' * (w + 2)}|------------:|---------:|------------:|--------:|")
    for name in sorted(PATTERNS, key=lambda n: -saved[n]):
        pct = 100 * saved[name] / ni_total if ni_total else 0.0
        print(f"| {name:{w}} | {occ[name]:11,} | {progs_with[name]:8,} | {saved[name]:11,} | {pct:6.2f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
