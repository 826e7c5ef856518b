"""capsule.wasm on clang-19's wasm32 output: recursion, function pointers, memory ops, globals, switch."""

from __future__ import annotations

import pytest
from wasm_build import compile_c

from capsule.wasm import ExternKind, Instr, Module, Op, SegmentMode, ValType, load

PROGRAM = r"""
typedef unsigned long size_t;
extern void on0(void); extern void on1(void); extern void on2(void); extern void on3(void);
extern void on4(void); extern void on5(void);

int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

typedef int (*op_t)(int, int);
static int add(int a, int b) { return a + b; }
static int mul(int a, int b) { return a * b; }
op_t ops[] = {add, mul};
int apply(int i, int a, int b) { return ops[i & 1](a, b); }

int counter = 5;
long long big = 1LL << 40;
int bump(int by) { counter += by; return counter; }

void *copy(void *d, const void *s, size_t n) { return __builtin_memcpy(d, s, n); }
void *fill(void *d, int c, size_t n) { return __builtin_memset(d, c, n); }

int dispatch(int x) {
    switch (x) {
    case 0: on0(); break;
    case 1: on1(); break;
    case 2: on2(); break;
    case 3: on3(); break;
    case 4: on4(); break;
    case 5: on5(); break;
    default: return -1;
    }
    return x;
}

double mix(double x, float y) { return x * y + (double)(long long)x; }
int to_int(float f) { return (int)f; }
signed char narrow(int x) { return (signed char)x; }
int sum(const char *s) { int t = 0; while (*s) t += *s++; return t; }
"""


@pytest.fixture(scope="module")
def module() -> Module:
    return load(compile_c(PROGRAM, ["-mnontrapping-fptoint", "-Wl,--allow-undefined"]))


def func_index(m: Module, name: str) -> int:
    return next(i for i in range(m.num_imported_funcs + len(m.funcs)) if m.func_name(i) == name)


def body(m: Module, name: str) -> list[Instr]:
    f = m.defined_func(func_index(m, name))
    assert f is not None
    return f.body


def ops(m: Module, name: str) -> list[int]:
    return [i.op for i in body(m, name)]


def test_imports_and_names(module: Module) -> None:
    assert [(i.module, i.name, i.kind) for i in module.imports][:1] == [("env", "on0", ExternKind.FUNC)]
    assert module.num_imported_funcs == 6
    for name in ("fib", "apply", "bump", "copy", "fill", "dispatch", "mix", "sum"):
        index = func_index(module, name)
        assert index >= module.num_imported_funcs
        assert module.export(name) is not None and module.export(name).index == index  # type: ignore[union-attr]
    assert module.names.funcs, "wasm-ld keeps a name section"


def test_recursion(module: Module) -> None:
    fib = func_index(module, "fib")
    calls = [i.imm for i in body(module, "fib") if i.op == Op.CALL]
    assert fib in calls
    assert module.func_type(fib).params == (ValType.I32,) and module.func_type(fib).results == (ValType.I32,)


def test_function_pointers(module: Module) -> None:
    indirect = [i for i in body(module, "apply") if i.op == Op.CALL_INDIRECT]
    assert len(indirect) == 1
    type_index, table = indirect[0].imm  # type: ignore[misc]
    assert table == 0 and str(module.types[type_index]) == "[i32 i32] -> [i32]"
    (seg,) = module.elems
    assert seg.mode == SegmentMode.ACTIVE and seg.type == ValType.FUNCREF
    assert [module.func_name(i) for i in seg.func_indices()] == ["add", "mul"]  # type: ignore[arg-type]
    assert module.all_tables()[0].elem == ValType.FUNCREF


def test_globals_and_data(module: Module) -> None:
    sp = module.all_globals()[0]
    assert sp.type == ValType.I32 and sp.mutable  # __stack_pointer
    bump_globals = {i.imm for i in body(module, "bump") if i.op in (Op.GLOBAL_GET, Op.GLOBAL_SET)}
    assert not bump_globals, "counter lives in linear memory, not in a wasm global"
    counter = module.export("counter")
    assert counter is not None and counter.kind == ExternKind.GLOBAL
    addr = module.globals[counter.index - module.num_imported_globals].init[0].imm
    (data,) = [d for d in module.datas if d.mode == SegmentMode.ACTIVE]
    base = data.offset_expr[0].imm  # type: ignore[index]
    assert data.init[addr - base : addr - base + 4] == (5).to_bytes(4, "little")  # type: ignore[operator]
    assert (1 << 40).to_bytes(8, "little") in data.init


def test_memory_ops(module: Module) -> None:
    assert Op.MEMORY_COPY in ops(module, "copy")
    assert Op.MEMORY_FILL in ops(module, "fill")
    assert module.data_count is None or module.data_count == len(module.datas)
    assert module.all_memories()[0].limits.min >= 1
    loads = [i for i in body(module, "sum") if i.op == Op.I32_LOAD8_S or i.op == Op.I32_LOAD8_U]
    assert loads and all(i.imm.align == 0 for i in loads)  # type: ignore[attr-defined]


def test_switch_is_br_table(module: Module) -> None:
    code = body(module, "dispatch")
    tables = [i for i in code if i.op == Op.BR_TABLE]
    assert len(tables) == 1 and len(tables[0].imm.labels) >= 6  # type: ignore[attr-defined]


def test_floats_and_conversions(module: Module) -> None:
    assert {Op.F64_MUL, Op.F64_PROMOTE_F32} <= set(ops(module, "mix"))
    assert Op.I32_TRUNC_SAT_F32_S in ops(module, "to_int")
    assert Op.I32_EXTEND8_S in ops(module, "narrow")


def test_block_structure_is_consistent(module: Module) -> None:
    """Every block/loop/if points at its matching end, ends nest properly, and the body ends with end."""
    for f in module.funcs:
        stack: list[int] = []
        for k, ins in enumerate(f.body):
            if ins.op in (Op.BLOCK, Op.LOOP, Op.IF):
                assert f.body[ins.end].op == Op.END
                stack.append(k)
            elif ins.op == Op.ELSE:
                assert f.body[stack[-1]].else_ == k and f.body[stack[-1]].end == ins.end
            elif ins.op == Op.END and stack:
                assert f.body[stack.pop()].end == k
        assert not stack and f.body[-1].op == Op.END
        assert len(f.locals) >= f.num_params
