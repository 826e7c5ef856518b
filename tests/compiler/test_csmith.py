"""Random programs, differential: 300 csmith programs natively (gcc -m32), under wasmtime and in the kernel.

The harness (``csmith_harness``) keeps the first ``COUNT`` seeds whose programs end quickly natively and runs
them in batches of ``BATCH`` per module; the batches rotate through both memory modes and both loop profiles
(``csmith_harness.ROTATION``). Every kernel checksum must equal wasmtime's and the native one; a failure names
each seed at fault with the command that reproduces it. ``python -m tests.compiler.csmith_harness --many N``
runs thousands the same way.
"""

from __future__ import annotations

import pytest

from tests.fds import bpf_fd_count

from . import csmith_harness as h

COUNT = 300
GROUPS = COUNT // h.BATCH


@pytest.fixture(scope="module")
def groups() -> list[list[h.Seed]]:
    try:
        records = h.kept_seeds(COUNT)
        groups = h.batches(records)
        h.prebuild(groups)
    except h.CsmithError as e:
        pytest.fail(f"the csmith programs cannot be made on this machine: {e}", pytrace=False)
    assert len(groups) == GROUPS
    return groups


def test_rotation_covers_both_memory_modes_and_loop_profiles() -> None:
    profiles = [h.profile_for(k) for k in range(GROUPS)]
    assert {p.checked for p in profiles} == {True, False}
    assert {p.may_goto for p in profiles} == {True, False}
    assert sum(p == h.DEFAULT for p in profiles) * 2 >= GROUPS  # at least half the programs in the default build


def test_parse_splits_the_output_by_seed() -> None:
    out = f"{h.SEED_LINE}7\nchecksum = 1A2B\n{h.SEED_LINE}9\nboom\n{h.SEED_LINE}11\n"
    assert h.parse(out) == {7: "1A2B", 9: "boom", 11: ""}


def test_an_endless_program_is_dropped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "spin.c"
    src.write_text("int main(void) { for (volatile unsigned i = 0;; i++) ; }\n")
    exe = tmp_path / "spin"
    h.subprocess.run(["gcc", "-O1", str(src), "-o", str(exe)], check=True)
    code, out, cpu_ms = h._run_limited(exe)
    # ended by the CPU limit's signal after about the limit: RLIMIT_CPU is charged in ticks, rusage exactly,
    # so on a loaded machine the kill comes somewhat before CPU_LIMIT_S of measured time
    assert code in (-h.signal.SIGXCPU, -h.signal.SIGKILL) and out == ""
    assert 1000 * h.CPU_LIMIT_S * 0.5 <= cpu_ms <= 1000 * (h.CPU_LIMIT_S + 1)


@pytest.mark.requires_bpf
def test_a_wrong_checksum_is_a_failure_that_names_its_reproducer(groups: list[list[h.Seed]]) -> None:
    """The net itself: a batch whose expected checksum is wrong fails, and the message says how to rerun it."""
    rec = groups[0][0]
    wrong = h.Seed(rec.seed, "ok", "DEADBEEF", rec.cpu_ms)
    res = h.check_batch([wrong, *groups[0][1:3]], h.UNCHECKED)
    assert [m.seed for m in res.mismatches] == [rec.seed]
    m = res.mismatches[0]
    assert m.native == "DEADBEEF" and m.wasmtime == m.kernel == rec.checksum
    assert f"--seed {rec.seed} --unchecked" in str(m)


@pytest.mark.requires_bpf
@pytest.mark.parametrize("index", range(GROUPS), ids=lambda k: f"batch{k:02d}-{h.profile_for(k).name}")
def test_batch_agrees_with_native_and_wasmtime(groups: list[list[h.Seed]], index: int) -> None:
    before = bpf_fd_count()
    res = h.check_batch(groups[index], h.profile_for(index))
    print(f"seeds {res.seeds[0]}..{res.seeds[-1]} ({res.profile.name}): {res.seconds:.1f} s")
    assert not res.mismatches, f"{len(res.mismatches)} of {len(res.seeds)} programs differ:\n" + "\n".join(
        map(str, res.mismatches))
    assert bpf_fd_count() == before
