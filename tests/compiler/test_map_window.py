"""The map window (``Options(window="map")``, ``capsule.compiler.window``): guest memory and the runtime area
in mmapable ARRAY pieces, the tier kernels without ``BPF_MAP_TYPE_ARENA`` get (Debian 12's 6.1). Forced on
the host, so the regular suite tests the tier without a VM: spec-suite files, differential samples, a C
program, memory growth within the pieces, and the host sharing the pieces' pages."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from capsule.bpf.elf import read_object
from capsule.bpf.elf_write import object_bytes
from capsule.bpf.uapi import MapType
from capsule.compiler import Options, abi, compile_module
from capsule.compiler.window import MEMORY_SLACK, RECORD_SLACK, STACK_SLACK, Window
from capsule.kernel.preflight import insn_feature
from capsule.runtime import Instance
from capsule.runtime.wasi_host import WasiConfig, WasiHost
from capsule.sources import fetch
from capsule.sources import lua as lua_recipe
from capsule.testing.engines import open_guest
from capsule.testing.wast_exec import ExecReport, WastExecutor, run_script
from capsule.toolchain.guest import build_wasm
from capsule.wasm import load
from capsule.wasm.wast import convert
from tests.thirdparty.test_lua import ARGS, ENV, NATIVE_CACHE, SCRIPTS, Lua, Run, _same, run_native

from .diff_harness import Pair, build_source
from .test_spec_exec import CACHE, LOCAL, SUITE

pytestmark = pytest.mark.requires_bpf

# the map-v3 profile's build (no may_goto: the bounded dispatcher; cpu v3), and the map tier with may_goto and
# cpu v4 (map-v4 has no may_goto, but the tier must not depend on the other choices)
MAP = Options(window="map", may_goto=False, cpu=3)
MAP_MAY_GOTO = Options(window="map")
SPEC_FILES = ["i32", "i64", "int_exprs", "address", "load", "memory_trap", "memory_fill", "call_indirect",
              "memory_grow_single", "f32", "f64", "conversions"]
PROGRAMS = Path(__file__).parents[1] / "programs"

GROW = """
#include <stdint.h>
__attribute__((export_name("grow"))) int32_t grow(int32_t pages) { return __builtin_wasm_memory_grow(0, pages); }
__attribute__((export_name("size"))) int32_t size(void) { return __builtin_wasm_memory_size(0); }
__attribute__((export_name("poke"))) int32_t poke(int32_t page, int32_t v) {
    volatile int32_t *p = (volatile int32_t *)(uintptr_t)(page * 65536 + 60);
    int32_t old = *p;
    *p = v;
    return old;
}
"""


@pytest.mark.parametrize("name", SPEC_FILES)
def test_spec_file_on_the_map_window(name: str) -> None:
    wast = LOCAL / f"{name}.wast" if (LOCAL / f"{name}.wast").exists() else SUITE / f"{name}.wast"
    report = run_script(wast, CACHE, MAP)
    failed = [f"{r.line}: {r.kind}: {r.detail}" for r in report.failures()]
    assert not failed, "\n".join(failed[:10])
    assert report.counts["passed"] > 0


TWO_MODULES = """
(module (func (export "f") (result i32) (i32.const 1)))
(assert_return (invoke "f") (i32.const 1))
(module $M (func (export "f") (result i32) (i32.const 2)))
(module (func (export "f") (result i32) (i32.const 3)))
(assert_return (invoke $M "f") (i32.const 2))
(assert_return (invoke "f") (i32.const 3))
"""


def test_spec_scripts_close_the_modules_nothing_reaches(tmp_path: Path) -> None:
    """A spec file's anonymous module is closed when the next replaces it (each holds its pieces' memory);
    a named one stays for the commands that name it."""
    wast = tmp_path / "two.wast"
    wast.write_text(TWO_MODULES)
    conv = convert(wast, tmp_path / "cache")
    report = ExecReport(wast.name)
    with WastExecutor(MAP) as ex:
        ex.run(json.loads(conv.json_path.read_text())["commands"], conv.json_path.parent, report)
        assert [m.line for m in ex.all] == [4, 5]  # the first module closed, $M and the current one open
    assert not report.failures() and report.counts["passed"] == 6


def test_object_has_pieces_not_an_arena() -> None:
    spec = compile_module(load(build_source(GROW)), MAP)
    assert abi.WINDOW_MAP not in spec.maps
    pieces = [spec.maps[name] for name in abi.MAP_PIECES]
    assert all(p.type == MapType.ARRAY and p.max_entries == 1 for p in pieces)
    mem, rt, fibers, stacks = pieces
    assert mem.value_size == 64 * 2**20 + MEMORY_SLACK  # no declared maximum: the default piece
    assert rt.value_size == 4 * 2**20 + RECORD_SLACK  # control block, globals, function info, one small table
    assert fibers.value_size == 4096 + RECORD_SLACK  # 4 records of 256 bytes, a page
    assert stacks.value_size == 64 * 2**20 + STACK_SLACK  # 4 fibers x 16 MiB stacks
    assert all(i.src == 0 or i.ref != abi.WINDOW_MAP for p in spec.programs.values() for i in p.insns)
    # nothing a 6.1 kernel lacks: no arena cast, no may_goto, no cpu v4 instruction
    used = {insn_feature(i) for p in spec.programs.values() for i in p.insns} - {None}
    assert used <= {"gotol", "cpu_v3", "cpu_v2"}, used
    # the ELF form keeps the pieces (.bss sections) and loads
    again = read_object(object_bytes(spec))
    assert again.maps[abi.MEMORY_PIECE].value_size == mem.value_size
    with Instance(again) as inst:
        assert inst.call("size") == [inst.meta.memory.initial]


@pytest.mark.parametrize("options", [MAP, MAP_MAY_GOTO], ids=["bounded", "may_goto"])
def test_differential_samples(options: Options) -> None:
    rec = Pair("recursion", options)
    for n in (0, 1, 15, 20):
        rec.value("fib", n)
    rec.value("deep", 10_000)
    loop = Pair("loop", options)
    for n, seed in ((0, 1), (1000, 5), (100_000, 9)):
        loop.value("spin", n, seed)
    qs = Pair("qsort", options)
    for k in (0, 1, 2):
        assert qs.value("sort_ints", 2000, 31 + k, k, 1000) != -1
    qs.value("sort_recs", 500, 4)


def test_memory_grows_within_its_piece_and_the_host_shares_the_pages() -> None:
    spec = compile_module(load(build_source(GROW)), Options(window="map", may_goto=False, window_piece=1 << 20))
    with Instance(spec) as inst:
        start = inst.call("size")[0]
        assert inst.meta.memory.max == 16  # the 1 MiB piece
        assert inst.call("grow", 16 - start) == [start]
        assert inst.call("grow", 1) == [-1]  # past the piece: fails as past the maximum
        assert inst.call("size") == [16]
        inst.mem[15 * 65536 + 60:15 * 65536 + 64] = (1234).to_bytes(4, "little")  # the host writes, BPF reads
        assert inst.call("poke", 15, 99) == [1234]
        assert int.from_bytes(inst.mem[15 * 65536 + 60:15 * 65536 + 64], "little") == 99


def test_a_small_build_creates_small_maps() -> None:
    """The pieces are sized for the build: its memory's declared maximum, its fibers' stacks, its tables, read
    back from the kernel's maps. (Once every build's runtime piece was 128 MiB, the stacks starting 64 MiB into
    the runtime area: a spec file's modules ran a 3 GiB VM out of memory on 6.1.)"""
    wasm = build_source(GROW, extra=["-Wl,--initial-memory=131072", "-Wl,--max-memory=262144"])
    spec = compile_module(load(wasm), Options(window="map", may_goto=False, cpu=3, fibers=1, stack_size=1 << 20))
    with Instance(spec) as inst:
        sizes = {name: inst.coll.maps[name].info().value_size for name in abi.MAP_PIECES}
        assert inst.call("grow", 2) == [2] and inst.call("grow", 1) == [-1]  # 4 pages: the declared maximum
        assert inst.call("poke", 3, 7) == [0] and inst.call("poke", 3, 8) == [7]
    assert sizes == {abi.MEMORY_PIECE: 256 * 1024 + MEMORY_SLACK, abi.RUNTIME_PIECE: 4 * 2**20 + RECORD_SLACK,
                     abi.FIBER_PIECE: 4096 + RECORD_SLACK, abi.STACK_PIECE: 2**20 + STACK_SLACK}
    assert sum(sizes.values()) < 7 * 2**20  # was 192 MiB for any build


def test_the_runtime_pieces_follow_tables_and_refuse_what_cannot_fit() -> None:
    assert Window.map(4, 16 << 20, 1 << 16).runtime_piece == 2 << 20  # no table: up to the function info
    assert Window.map(4, 16 << 20, 1 << 16, [None, 10]).runtime_piece == 8 << 20  # table 0 unbounded
    assert Window.map(64, 1 << 20, 1 << 16).fiber_piece == 16 << 10
    with pytest.raises(ValueError, match="give the tables a maximum"):
        Window.map(4, 16 << 20, 1 << 16, [None] * 8)
    with pytest.raises(ValueError, match="use fewer fibers or smaller stacks"):
        Window.map(8, 16 << 20, 1 << 16)


def test_a_memory_larger_than_a_piece_is_refused_at_build() -> None:
    wasm = build_source(GROW, extra=["-Wl,--initial-memory=2097152"])
    with pytest.raises(Exception, match="does not fit the map window's piece"):
        compile_module(load(wasm), Options(window="map", window_piece=1 << 20))


def _run(wasm: Path, options: Options | None, engine: str) -> tuple[int, bytes]:
    out = io.BytesIO()
    g = open_guest(wasm, engine, options)
    try:
        code = WasiHost(g, WasiConfig(args=["strings"], stdout=out, stderr=io.BytesIO())).run()
    finally:
        g.close()
    return code, out.getvalue()


def test_c_program_prints_what_the_reference_prints() -> None:
    wasm = build_wasm([PROGRAMS / "strings.c"], ["-O2"]).wasm
    spec = compile_module(load(wasm), MAP)
    used = {insn_feature(i) for p in spec.programs.values() for i in p.insns}
    assert used <= {None, "cpu_v2", "cpu_v3", "gotol"}, used  # its calls, soft-float and libc: nothing 6.1 lacks
    on_map = _run(wasm, MAP, "kernel")
    assert on_map == _run(wasm, None, "wasmtime")
    assert on_map[0] == 0 and b"strerror ok" in on_map[1]


@pytest.fixture(scope="module")
def lua() -> Lua:
    """As ``tests/thirdparty/test_lua.py`` builds it (cached)."""
    try:
        tree = lua_recipe.fetch()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"Lua is not cached and PyPI cannot be reached: {e}")
    return Lua(tree, lua_recipe.build_wasm(tree), lua_recipe.build_native(tree, NATIVE_CACHE))


@pytest.mark.parametrize("options", [MAP, MAP_MAY_GOTO], ids=["map-v3", "may_goto"])
def test_lua_scripts_match_native(lua: Lua, options: Options) -> None:
    """Lua's scripts on the map window print what native Lua prints (its bench's checksums, the features
    script, its uncaught error and traceback). With may_goto, Lua has direct calls of callees that never
    return, whose entries are deleted whole: the verifier refused it (an unreachable instruction) while the
    deletion counted FRAME's arena form, one instruction, instead of the map tier's three."""
    native = run_native(lua.native, ARGS)
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WasiConfig(args=["lua", *ARGS], env=ENV, dirs=[(SCRIPTS, "/")], stdin=b"", stdout=stdout, stderr=stderr)
    guest = open_guest(lua.wasm, "kernel", options)
    try:
        code = WasiHost(guest, config).run()
    finally:
        guest.close()
    _same(native, Run(stdout.getvalue(), stderr.getvalue(), code))


def test_capsule_build_for_a_profile(tmp_path: Path) -> None:
    """``capsule build --profile map-v3``: the map window, no may_goto, cpu v3, and the profile's name in the
    object (which a kernel lacking it refuses before loading); an unknown profile is one line."""
    from capsule.cli import main
    from capsule.kernel.profiles import PROFILE_SECTION

    src = tmp_path / "grow.wasm"
    src.write_bytes(build_source(GROW))
    out = tmp_path / "grow.bpf.o"
    assert main(["build", str(src), "-o", str(out), "--profile", "map-v3"]) == 0
    spec = read_object(out)
    assert spec.extra_sections[PROFILE_SECTION] == b"map-v3"
    assert abi.MEMORY_PIECE in spec.maps and abi.WINDOW_MAP not in spec.maps
    assert {insn_feature(i) for p in spec.programs.values() for i in p.insns} <= {None, "cpu_v2", "cpu_v3"}
    with pytest.raises(SystemExit, match="no kernel profile 'map-v9'"):
        main(["build", str(src), "-o", str(out), "--profile", "map-v9"])

