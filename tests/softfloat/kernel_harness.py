"""Run soft-float library functions in the kernel over arrays of inputs.

For each library function we load one SYSCALL program, assembled with ``capsule.bpf.asm`` around the function's
*extracted* instructions (exactly what the compiler will place in its own programs), with BTF built by
``softfloat.add_to_btf``. The program calls ``bpf_loop`` over an ARRAY map element laid out as::

    0        count (u64)
    8        a[N]    first arguments
    8+8N     b[N]    second arguments
    8+16N    out[N]  results

so one ``BPF_PROG_TEST_RUN`` computes up to N results.
"""

from __future__ import annotations

import numpy as np

from capsule.bpf.asm import (
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    R7,
    R8,
    Builder,
    alu,
    call,
    call_helper,
    exit_,
    jmp,
    ld_func,
    ld_map_value,
    ldx,
    mov,
    stx,
)
from capsule.bpf.btf import BTF
from capsule.bpf.btf_types import Linkage
from capsule.bpf.insn import slot_offsets
from capsule.bpf.opcodes import Alu, Jmp
from capsule.bpf.spec import FuncInfo, MapSpec, ObjectSpec, ProgramSpec
from capsule.guest import softfloat
from capsule.kernel import Map, MapType, ProgFlags, Program, ProgType
from capsule.kernel.collection import create_maps, load_object_btf, load_program
from capsule.kernel.sys import FD

N = 16384
A_OFF, B_OFF, OUT_OFF = 8, 8 + 8 * N, 8 + 16 * N
VALUE_SIZE = 8 + 24 * N
BPF_FUNC_LOOP = 181
MAP = "sf_io"


def _program(func: softfloat.SoftFloatFunc, btf: BTF, ids: dict[str, int]) -> ProgramSpec:
    b = Builder()
    # main: bpf_loop(count, body, NULL, 0)
    b.emit(ld_map_value(R1, MAP, 0), ldx(8, R1, R1, 0), ld_func(R2, "body"), mov(R3, 0), mov(R4, 0))
    b.emit(call_helper(BPF_FUNC_LOOP), mov(R0, 0), exit_())
    # body(index, ctx): out[index] = func(a[index], b[index])
    b.label("body")
    b.emit(jmp(Jmp.JGE, R1, N, "stop"), mov(R6, R1), alu(Alu.LSH, R6, 3))
    b.emit(ld_map_value(R7, MAP, A_OFF), alu(Alu.ADD, R7, R6), ldx(8, R1, R7, 0))
    if func.arity > 1:
        b.emit(ld_map_value(R8, MAP, B_OFF), alu(Alu.ADD, R8, R6), ldx(8, R2, R8, 0))
    b.emit(call("func"), ld_map_value(R7, MAP, OUT_OFF), alu(Alu.ADD, R7, R6), stx(8, R7, 0, R0))
    b.emit(mov(R0, 0), exit_())
    b.label("stop")
    b.emit(mov(R0, 1), exit_())
    b.label("func")
    b.emit(*func.insns)
    insns = b.assemble()
    body_at, func_at = _label_slots(insns, len(func.insns))
    return ProgramSpec(
        name=func.name,
        section="syscall",
        type=ProgType.SYSCALL,
        flags=ProgFlags.SLEEPABLE,
        insns=insns,
        func_infos=[FuncInfo(0, ids["run"]), FuncInfo(body_at, ids["body"]), FuncInfo(func_at, ids[func.name])],
    )


def _label_slots(insns: list, func_len: int) -> tuple[int, int]:
    """Slot of the callback (first instruction after main's exit) and of the library function (the tail)."""
    slots = slot_offsets(insns)
    first_exit = next(i for i, ins in enumerate(insns) if ins.code == 0x95)
    return slots[first_exit + 1], slots[len(insns) - func_len]


class KernelLib:
    """Lazily loaded harness programs, one per library function. Close it to release every fd."""

    def __init__(self) -> None:
        self.lib = softfloat.library()
        btf = BTF()
        u64, i32 = btf.int_id(8), btf.int_id(4, signed=True)
        void_ptr = btf.add_ptr(0)
        ids = {
            "run": btf.add_func("run", btf.add_func_proto(i32, [("ctx", void_ptr)]), Linkage.GLOBAL),
            "body": btf.add_func("body", btf.add_func_proto(u64, [("i", u64), ("ctx", void_ptr)]), Linkage.STATIC),
        }
        for f in self.lib.functions.values():
            ids[f.name] = softfloat.add_to_btf(btf, f)
        self.spec = ObjectSpec(
            programs={f.name: _program(f, btf, ids) for f in self.lib.functions.values()},
            maps={MAP: MapSpec(MAP, MapType.ARRAY, 4, VALUE_SIZE, 1)},
            btf=btf,
        )
        self.btf_fd: FD | None = load_object_btf(self.spec)
        self.maps: dict[str, Map] = create_maps(self.spec, self.btf_fd)
        self.programs: dict[str, Program] = {}

    def program(self, name: str) -> Program:
        if name not in self.programs:
            self.programs[name] = load_program(self.spec.programs[name], self.maps, self.btf_fd)
        return self.programs[name]

    def run(self, name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """out[i] = name(a[i], b[i]) for every i, computed in the kernel (uint64 arrays)."""
        prog, io = self.program(name), self.maps[MAP]
        out = np.empty(len(a), dtype=np.uint64)
        buf = np.zeros(VALUE_SIZE // 8, dtype=np.uint64)
        for start in range(0, len(a), N):
            n = min(N, len(a) - start)
            buf[0] = n
            buf[1 : 1 + n] = a[start : start + n]
            if b is not None:
                buf[1 + N : 1 + N + n] = b[start : start + n]
            io.update(0, buf.tobytes())
            prog.test_run(ctx_in=b"")
            res = np.frombuffer(io.lookup(0), dtype=np.uint64)
            out[start : start + n] = res[1 + 2 * N : 1 + 2 * N + n]
        return out

    def close(self) -> None:
        for p in self.programs.values():
            p.close()
        for m in self.maps.values():
            m.close()
        if self.btf_fd is not None:
            self.btf_fd.close()
        self.programs, self.maps, self.btf_fd = {}, {}, None
