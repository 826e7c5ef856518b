"""Packet pointer reuse: a packet pointer loaded from the context again becomes a copy of the register that
still holds it.

XDP and skb programs read ``data``, ``data_end`` (and ``data_meta``) from the context at the top and again
further down (``r3 = *(u32 *)(r7 + 4)`` while ``r9`` still holds ``data_end``: clang rematerialises the load
rather than keep a register live across the parsing code). Each reload is an instruction the verifier
processes on every path through it; as ``rX = rY`` it is one the copy propagation pass can then remove (the
readers read ``rY``), and a copy also keeps the range the verifier has already proven for ``rY``.

Which register holds which field is a must-analysis (``held_fields``, solved by ``regfacts.must_hold``): ``rY``
holds field ``off`` of the context when every path to that point loaded it from there and nothing wrote ``rY``
since. Any call forgets everything: helpers that change the packet (``bpf_xdp_adjust_head``,
``bpf_skb_pull_data``, ...) move ``data``/``data_end``, and the verifier invalidates every packet pointer a
register held across them. Only the context's pointer fields are reused: a context *scalar* reloaded is a fresh
value the verifier links to nothing, and a copy would link the two registers (one scalar id), which changes how it
narrows and prunes.

Why the verifier accepts the copy: a ``mov`` gives ``rX`` ``rY``'s pointer type and offset (0) and the range
already proven for it, which is at least what a fresh load has (none); packet pointers loaded from the context
share the verifier's id 0, so a later bounds check narrows the same registers either way.
"""

from __future__ import annotations

from capsule.bpf.insn import Insn
from capsule.bpf.opcodes import Alu, Class, Mode, Size, Src

from ..analysis import Analysis
from ..effects import CALL
from ..regfacts import NOTHING, NREGS, Held, must_hold
from ..values import CTX_POINTERS, Kind, access_val
from .base import Edits, Pass

__all__ = ["PktReuse", "held_fields"]

_LDX_W = int(Class.LDX | Mode.MEM | Size.W)  # the pointer fields are 32-bit context loads
_MOV64_X = int(Class.ALU64 | Alu.MOV | Src.X)

# helpers that never change packet data (``bpf_helper_changes_pkt_data`` is false for them): map operations,
# time, random, CPU id, current task ids, trace_printk, redirect and redirect_map, perf event and ring buffer
# output, csum_diff, the hash and the per-CPU lookup
_KEEPS_PACKET = frozenset((1, 2, 3, 5, 6, 7, 8, 14, 15, 16, 23, 25, 28, 34, 35, 51, 87, 88, 89, 118, 125, 130, 131,
                           132, 133, 134, 160, 195))



def _loaded_field(a: Analysis, i: int, fields: dict[int, Kind]) -> int | None:
    """The context pointer field instruction ``i`` loads, if it is such a load."""
    ins = a.code.insns[i]
    if ins.code != _LDX_W:
        return None
    p = access_val(a.values, i, ins.src, ins.off)
    if p.kind != Kind.CTX:
        return None
    off = p.const_offset
    return off if off in fields else None


def held_fields(a: Analysis) -> dict[int, Held[int]]:
    """Per reachable instruction, which context pointer field each register holds before it."""
    fields = CTX_POINTERS.get(a.prog_type, {})
    if not fields:
        return {}
    effs = a.effects
    insns = a.code.insns
    loads = {i: f for i in range(len(insns)) if (f := _loaded_field(a, i, fields)) is not None}

    def step(i: int, cur: list[int | None]) -> None:
        ins = insns[i]
        if effs[i].call and not (ins.code == CALL and ins.src == 0 and ins.imm in _KEEPS_PACKET):
            cur[:] = NOTHING
            return
        d = effs[i].defs
        if not d:
            return
        src = cur[ins.src] if ins.code == _MOV64_X and not ins.off else None
        for r in range(NREGS):
            if d >> r & 1:
                cur[r] = None
        f = loads.get(i)
        if f is not None:
            cur[ins.dst] = f
        elif src is not None:
            cur[ins.dst] = src

    return must_hold(a, step)


class PktReuse(Pass):
    name = "pktreuse"
    summary = "a packet pointer reloaded from the context becomes a copy of the register still holding it"

    def find(self, a: Analysis, e: Edits) -> None:
        fields = CTX_POINTERS.get(a.prog_type)
        if not fields:
            return
        insns = a.code.insns
        held = None
        for i in range(len(insns)):
            f = _loaded_field(a, i, fields)
            if f is None:
                continue
            if held is None:
                held = held_fields(a)
            h = held.get(i)
            if h is None:
                continue
            dst = insns[i].dst
            src = next((r for r in range(NREGS) if h[r] == f and r != dst), None)
            if src is None:
                if h[dst] == f and e.free(i):  # the register already holds it
                    e.delete.add(i)
                    e.rewrites += 1
                continue
            if e.free(i):
                e.replace[i] = Insn(_MOV64_X, dst, src, sym=insns[i].sym)
                e.rewrites += 1
