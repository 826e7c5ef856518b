"""Verifier logs: statistics parsing, failure extraction, log levels, log buffer growth."""

from __future__ import annotations

import errno

import pytest
from kprogs import ether

from capsule.bpf.asm import FP, R0, R1, R2, R3, Builder, call, call_helper, exit_, ldx, mov, st
from capsule.kernel import LogLevel, Program, ProgType, VerifierError, parse_stats
from capsule.kernel.errors import parse_failure

STATS_LOG = """\
func#0 @0
0: R1=ctx() R10=fp0
0: (b7) r0 = 2                        ; R0_w=2
1: (95) exit
verification time 25 usec
stack depth 0+16+8
processed 2 insns (limit 1000000) max_states_per_insn 1 total_states 3 peak_states 4 mark_read 5
"""


def test_parse_stats_full():
    st = parse_stats(STATS_LOG)
    assert st.processed_insns == 2 and st.insn_limit == 1_000_000
    assert (st.max_states_per_insn, st.total_states, st.peak_states, st.mark_read) == (1, 3, 4, 5)
    assert st.verification_time_usec == 25
    assert st.stack_depths == [0, 16, 8] and st.stack_depth == 0
    assert st.extra == {}


def test_parse_stats_tolerates_new_and_missing_fields():
    st = parse_stats("processed 7 insns (limit 1000000) max_states_per_insn 0 total_states 1 peak_states 1 "
                     "new_counter 9\n")
    assert st.processed_insns == 7 and st.mark_read is None and st.extra == {"new_counter": 9}
    empty = parse_stats("")
    assert empty.processed_insns is None and empty.stack_depths == [] and empty.stack_depth == 0


def test_parse_failure_samples():
    log = ("0: R1=ctx() R10=fp0\n0: (b7) r0 = 0                        ; R0_w=0\n"
           "1: (61) r0 = *(u32 *)(r3 +0)\nR3 !read_ok\n"
           "processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0\n")
    assert parse_failure(log) == (1, "(61) r0 = *(u32 *)(r3 +0)", "R3 !read_ok")
    assert parse_failure("last insn is not an exit or jmp\nprocessed 0 insns (limit 1000000)\n") == (
        None, None, "last insn is not an exit or jmp")
    assert parse_failure("") == (None, None, None)


@pytest.mark.requires_bpf
def test_rejection_names_the_instruction_and_reason():
    insns = [mov(R0, 0), mov(R1, 1), mov(R2, 2), ldx(4, R0, R3, 0), exit_()]
    with pytest.raises(VerifierError) as ei:
        Program.load(ProgType.XDP, insns, name="uninit")  # log_level 0: the log is fetched on failure
    e = ei.value
    assert e.errno == errno.EACCES
    assert e.insn_index == 3
    assert e.insn_text == "(61) r0 = *(u32 *)(r3 +0)"
    assert e.reason == "R3 !read_ok"
    assert "processed" in e.log
    text = str(e)
    assert "PROG_LOAD" in text and "'uninit'" in text
    assert "at insn 3: (61) r0 = *(u32 *)(r3 +0)" in text and "reason: R3 !read_ok" in text


@pytest.mark.requires_bpf
def test_rejection_of_a_bad_context_access_at_level_2():
    insns = [mov(R0, 0), ldx(4, R0, R1, 200), exit_()]
    with pytest.raises(VerifierError) as ei:
        Program.load(ProgType.XDP, insns, log_level=LogLevel.BRANCHES | LogLevel.INSNS)
    assert ei.value.insn_index == 1
    assert ei.value.reason == "invalid bpf_context access off=200 size=4"


@pytest.mark.requires_bpf
def test_rejection_before_the_walk():
    with pytest.raises(VerifierError) as ei:
        Program.load(ProgType.XDP, [mov(R0, 0)])  # falls off the end
    assert ei.value.errno == errno.EINVAL
    assert ei.value.insn_index is None
    assert "last insn is not an exit or jmp" in ei.value.reason
    with pytest.raises(VerifierError) as ei:
        Program.load(ProgType.XDP, [call_helper(100000), exit_()])
    assert ei.value.insn_index == 0 and "invalid func unknown#100000" in ei.value.reason


@pytest.mark.requires_bpf
def test_log_level_1_keeps_log_and_stats():
    with Program.load(ProgType.XDP, [mov(R0, 2), exit_()], log_level=LogLevel.BRANCHES) as p:
        assert "processed 2 insns" in p.log
        assert p.stats.processed_insns == 2 == p.info().verified_insns
        assert p.stats.verification_time_usec is None  # only with the STATS bit
        assert p.test_run(ether()).retval == 2


@pytest.mark.requires_bpf
def test_log_level_2_has_every_insn():
    with Program.load(ProgType.XDP, [mov(R0, 2), exit_()], log_level=LogLevel.BRANCHES | LogLevel.INSNS) as p:
        assert "(b7) r0 = 2" in p.log and "(95) exit" in p.log
        assert p.stats.processed_insns == 2


@pytest.mark.requires_bpf
def test_log_level_stats_and_stack_depths():
    b = Builder()
    b.emit(st(8, FP, -8, 1), call("sub"), exit_())
    b.label("sub")
    b.emit(st(8, FP, -16, 2), mov(R0, 3), exit_())
    with Program.load(ProgType.XDP, b.assemble(), log_level=LogLevel.STATS) as p:
        assert p.stats.verification_time_usec is not None
        assert p.stats.stack_depths == [8, 16]
        assert p.stats.processed_insns == p.info().verified_insns
        assert p.test_run(ether()).retval == 3
    with Program.load(ProgType.XDP, [mov(R0, 2), exit_()]) as p:
        assert p.log == "" and p.stats is None  # nothing asked, nothing kept


@pytest.mark.requires_bpf
def test_small_log_buffer_grows():
    # a 64-byte log cannot hold a level-2 log: the kernel answers ENOSPC and the load is retried bigger
    insns = [mov(R0, 0)] * 50 + [exit_()]
    with Program.load(ProgType.XDP, insns, log_level=LogLevel.BRANCHES | LogLevel.INSNS, log_size=64) as p:
        assert len(p.log) > 64
        assert p.log.startswith("func#0") or p.log.startswith("0:")
        assert p.stats.processed_insns == 51
