"""capsule.toolchain.objects and the guest build on top of it: one cached object per source, so that a change
to one file (or to a header one file includes) recompiles that file only; compiles side by side; progress
events; the first failing source is the one reported."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from capsule.toolchain.clang import ToolchainError
from capsule.toolchain.guest import Source, build_wasm
from capsule.toolchain.objects import Job, compile_objects, read_deps
from capsule.toolchain.progress import BuildEvent

# A stand-in compiler: records when it ran, sleeps, writes the object and a dependency file (as -MD -MF do),
# and fails on a source that contains "BROKEN".
FAKE_CC = """#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in -MF) dep="$2"; shift;; -o) out="$2"; shift;; -c) src="$2"; shift;; esac; shift
done
echo "start $(date +%s.%N) $src" >> "$LOG"
if grep -q BROKEN "$src"; then echo "$src: error: broken" >&2; exit 1; fi
sleep 0.5
cp "$src" "$out"; echo "$out: $src" > "$dep"
echo "end $(date +%s.%N) $src" >> "$LOG"
"""


@pytest.fixture
def fake_cc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cc = tmp_path / "fake-cc"
    cc.write_text(FAKE_CC)
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("LOG", str(tmp_path / "log"))
    return cc


def _sources(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        p = tmp_path / f"s{i}.c"
        p.write_text(f"int f{i};\n")
        out.append(p)
    return out


def test_compiles_run_side_by_side_and_are_cached(fake_cc: Path, tmp_path: Path) -> None:
    srcs = _sources(tmp_path, 4)
    jobs = [Job(str(fake_cc), ("-O2",), s) for s in srcs]
    events: list[BuildEvent] = []
    objs = compile_objects(jobs, tmp_path / "cache", workers=2, progress=events.append)
    assert [o.source for o in objs] == srcs and not any(o.cached for o in objs)
    assert [o.path.read_text() for o in objs] == [s.read_text() for s in srcs]
    assert [(e.stage, e.done, e.total) for e in events] == [("compile", i, 4) for i in range(1, 5)]
    lines = [line.split() for line in (tmp_path / "log").read_text().splitlines()]
    times = [(float(t), kind) for kind, t, *src in lines if src]  # (not the `--version` run, which has no source)
    running = peak = 0
    for _, kind in sorted(times):
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 2  # two compiles at once, never more
    again = compile_objects(jobs, tmp_path / "cache", workers=2)
    assert all(o.cached for o in again) and [o.digest for o in again] == [o.digest for o in objs]


def test_change_to_one_source_recompiles_it_alone(fake_cc: Path, tmp_path: Path) -> None:
    srcs = _sources(tmp_path, 3)
    jobs = [Job(str(fake_cc), (), s) for s in srcs]
    compile_objects(jobs, tmp_path / "cache")
    srcs[1].write_text("int changed;\n")
    objs = compile_objects(jobs, tmp_path / "cache")
    assert [o.cached for o in objs] == [True, False, True]
    assert not compile_objects([Job(str(fake_cc), ("-DX",), srcs[0])], tmp_path / "cache")[0].cached  # flags: key


def test_first_failing_source_is_reported(fake_cc: Path, tmp_path: Path) -> None:
    srcs = _sources(tmp_path, 4)
    srcs[1].write_text("BROKEN one\n")
    srcs[3].write_text("BROKEN three\n")
    with pytest.raises(ToolchainError, match=r"s1\.c does not compile:\n.*s1\.c: error: broken"):
        compile_objects([Job(str(fake_cc), (), s) for s in srcs], tmp_path / "cache", workers=1)
    with pytest.raises(ToolchainError, match="no such file|No such file"):
        compile_objects([Job(str(fake_cc), (), tmp_path / "missing.c")], tmp_path / "cache")


def test_dependency_files_with_spaces_and_continuations(tmp_path: Path) -> None:
    dep = tmp_path / "x.d"
    dep.write_text("out.o: a.c /usr/include/stdio.h \\\n  my\\ dir/b.h \\\n  c.h\n")
    assert read_deps(dep) == [Path("a.c"), Path("/usr/include/stdio.h"), Path("my dir/b.h"), Path("c.h")]


# -- the guest build ----------------------------------------------------------------------------------------
def _program(tmp_path: Path) -> list[Path]:
    (tmp_path / "shared.h").write_text("#define SCALE 3\n")
    (tmp_path / "a.c").write_text('#include "shared.h"\nint a(int x) { return x * SCALE; }\n')
    (tmp_path / "b.c").write_text("int b(int x) { return x + 1; }\n")
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint a(int); int b(int);\n'
                                     'int main(void) { printf("%d\\n", a(b(4))); return 0; }\n')
    return [tmp_path / n for n in ("main.c", "a.c", "b.c")]


def test_one_changed_file_recompiles_one_file(tmp_path: Path) -> None:
    srcs, cache = _program(tmp_path), tmp_path / "cache"
    events: list[BuildEvent] = []
    first = build_wasm(srcs, cache=cache, progress=events.append)
    assert set(first.compiled) == {"main.c", "a.c", "b.c"} and not first.cached
    assert [e.stage for e in events] == ["compile"] * 3 + ["link"]
    again = build_wasm(srcs, cache=cache)
    assert again.cached and again.compiled == () and again.wasm == first.wasm
    (tmp_path / "b.c").write_text("int b(int x) { return x + 2; }\n")
    assert build_wasm(srcs, cache=cache).compiled == ("b.c",)
    (tmp_path / "shared.h").write_text("#define SCALE 5\n")  # a header: only the file that includes it
    changed = build_wasm(srcs, cache=cache)
    assert changed.compiled == ("a.c",) and not changed.cached and changed.wasm != first.wasm


def test_optimised_at_o2_unless_told(tmp_path: Path) -> None:
    srcs, cache = _program(tmp_path), tmp_path / "cache"
    default = build_wasm(srcs, cache=cache)
    assert build_wasm(srcs, ["-O2"], cache=cache).wasm == default.wasm  # the very same objects and module
    o0 = build_wasm(srcs, ["-O0"], cache=cache)
    assert o0.wasm != default.wasm and os.path.getsize(o0.wasm) > os.path.getsize(default.wasm)


def test_flags_for_one_file(tmp_path: Path) -> None:
    """A ``Source`` carries flags for itself alone (the other files do not see the macro)."""
    (tmp_path / "one.c").write_text("#ifndef ONLY_HERE\n#error no flag\n#endif\nint one(void) { return 1; }\n")
    (tmp_path / "main.c").write_text("#ifdef ONLY_HERE\n#error leaked\n#endif\nint one(void);\n"
                                     "int main(void) { return one(); }\n")
    res = build_wasm([tmp_path / "main.c", Source(tmp_path / "one.c", ("-DONLY_HERE",))], cache=tmp_path / "c")
    assert res.wasm.is_file()
    with pytest.raises(ToolchainError, match="no flag"):
        build_wasm([tmp_path / "main.c", tmp_path / "one.c"], cache=tmp_path / "c")
