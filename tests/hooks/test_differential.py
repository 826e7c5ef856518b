"""The kernel against gcc: the example flow handler (capsule/examples/packet_flows.c) run by the hook entry on
random frames with BPF_PROG_TEST_RUN must answer exactly as the same C file built natively and fed the same
frames: the verdict of every frame, every line it prints (one per new flow, in order), and the final report
(every flow's packets, bytes, TCP flags and options, sorted). A sample of frames runs in the regular suite,
many more with ``CAPSULE_SLOW=1``."""

from __future__ import annotations

import os
import random
import struct
import subprocess
from pathlib import Path

import pytest

from capsule.bpf.uapi import XDPAction
from capsule.hooks import packets as P

from .conftest import EXAMPLES

pytestmark = pytest.mark.requires_bpf

HARNESS = Path(__file__).parent / "native" / "harness.c"
INCLUDE = Path(__file__).resolve().parents[2] / "capsule" / "guest" / "include"
FRAMES = 50_000 if os.environ.get("CAPSULE_SLOW") else 3_000
SNAPLEN = 256
VERDICT = {1: XDPAction.PASS, 2: XDPAction.DROP}  # capsule_hook.h's verdicts -> XDP's


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("native") / "flows"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", f"-I{INCLUDE}", "-DREPORT=flows_report", "-o", str(exe),
                    str(EXAMPLES / "packet_flows.c"), str(HARNESS)], check=True, capture_output=True)
    return exe


def _frames(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    while len(out) < n:
        f = P.random_frame(rng)
        if len(f) >= 14:  # BPF_PROG_TEST_RUN refuses a frame shorter than an Ethernet header
            out.append(f)
    return out


def _run_native(exe: Path, frames: list[bytes]) -> tuple[list[int], list[str], list[str]]:
    data = struct.pack("<I", SNAPLEN) + b"".join(struct.pack("<I", len(f)) + f for f in frames)
    out = subprocess.run([str(exe)], input=data, capture_output=True, check=True).stdout.decode()
    verdicts, printed, report = [], [], []
    for line in out.splitlines():
        if line.startswith("verdict "):
            verdicts.append(VERDICT[int(line.split()[1])])
        elif len(verdicts) < len(frames):
            printed.append(line)
        else:
            report.append(line)
    return verdicts, printed, report


@pytest.mark.parametrize("seed", [1, 2])
def test_the_kernel_and_gcc_agree_on_random_frames(load, native, seed):
    from capsule.hooks.build import hook_object

    frames = _frames(seed, FRAMES // 2)
    want_verdicts, want_printed, want_report = _run_native(native, frames)
    prog, ring = load(hook_object("xdp", [EXAMPLES / "packet_flows.c"]), snaplen=SNAPLEN, heap=16 << 20)
    got_verdicts, got_printed = [], []
    for f in frames:
        got_verdicts.append(prog.run(f)[0])
        got_printed += ring.drain()
    prog.call("flows_report")
    got_report = ring.drain()
    assert got_verdicts == want_verdicts
    assert got_printed == want_printed
    assert got_report == want_report
    assert prog.stats().defaulted == 0
    # the frames were varied enough to mean something: flows of each kind, drops, damaged frames
    summary = want_report[0].split()
    packets, malformed, dropped, flows = (int(summary[k]) for k in (0, 2, 4, 6))
    assert packets == len(frames) and malformed > 50 and dropped > 10 and flows > 50
    assert len(want_printed) == flows and XDPAction.DROP in want_verdicts
    assert {ln.split()[0] for ln in want_report[1:]} >= {"tcp", "udp", "icmp"}
