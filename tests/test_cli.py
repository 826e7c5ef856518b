"""The `capsule` command: verify, disasm, demo, and bad input giving a clear error with no traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clang import CORPUS, compile_bpf

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "capsule" / "examples" / "packet_stats.bpf.c"


def capsule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True, timeout=120
    )


def bpftool_processed(obj: Path, tmp_path: Path) -> list[int]:
    """The processed-insns figures of bpftool's own verifier log (libbpf loads, -d prints the log)."""
    pin = Path("/sys/fs/bpf") / f"capsule-test-{os.getpid()}-{tmp_path.name}"
    try:
        res = subprocess.run(
            ["bpftool", "-d", "prog", "loadall", str(obj), str(pin)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        return [int(n) for n in re.findall(r"^processed (\d+) insns", res.stderr, re.M)]
    finally:
        shutil.rmtree(pin, ignore_errors=True)


@pytest.mark.requires_bpf
@pytest.mark.parametrize("obj", ["example", "xdp_parse", "tc_switch"])
def test_verify_matches_bpftool_processed_insns(obj: str, tmp_path: Path) -> None:
    path = compile_bpf(EXAMPLE if obj == "example" else CORPUS / f"{obj}.c")
    res = capsule("verify", str(path), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["verdict"] for r in rows] == ["success"] * len(rows)
    assert sorted(r["processed_insns"] for r in rows) == sorted(bpftool_processed(path, tmp_path))
    for r in rows:
        assert r["processed_insns"] == r["verified_insns"]
        assert r["jited_size"] > 0 and r["total_states"] >= r["peak_states"] > 0


@pytest.mark.requires_bpf
def test_verify_table_and_rejection() -> None:
    bad = compile_bpf("""
    #include <linux/bpf.h>
    #include <bpf/bpf_helpers.h>
    SEC("xdp") int ok(struct xdp_md *ctx) { return XDP_PASS; }
    SEC("xdp") int unchecked(struct xdp_md *ctx)
    {
        unsigned char *data = (void *)(long)ctx->data;
        return data[20];
    }
    char LICENSE[] SEC("license") = "GPL";
    """)
    res = capsule("verify", str(bad))
    assert res.returncode == 1
    assert "success" in res.stdout and "failure" in res.stdout
    assert re.search(r"unchecked: rejected at instruction \d+: .*outside of the packet", res.stdout)
    assert "Traceback" not in res.stdout + res.stderr


def test_disasm_text_matches_llvm_objdump() -> None:
    obj = compile_bpf(EXAMPLE)
    res = capsule("disasm", str(obj))
    assert res.returncode == 0, res.stderr
    ours = [line.split(":\t", 1)[1] for line in res.stdout.splitlines() if ":\t" in line]
    dump = subprocess.run(
        ["llvm-objdump-19", "-d", "--section=xdp", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    theirs = []
    for line in dump.splitlines():
        m = re.match(r"^\s*\d+:\t(?:[0-9a-f]{2} ?){8,16}\t(.*)$", line)
        if m:
            theirs.append(m.group(1))
    assert len(theirs) > 40
    # the program as capsule holds it is linked (subprograms appended, calls resolved) and its map/data
    # references are symbolic (offset in imm's high word), so pseudo calls and ld_imm64 differ by design
    differs = re.compile(r"^(call -?0x|r\d+ = 0x[0-9a-f]+ ll$)")
    pairs = list(zip(ours, theirs, strict=False))
    assert [o for o, t in pairs if not differs.match(t)] == [t for o, t in pairs if not differs.match(t)]


@pytest.mark.requires_bpf
def test_c_demo_runs_in_the_kernel_and_matches_native() -> None:
    res = capsule("demo")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "identical output" in res.stdout and "capsule (kernel)" in res.stdout
    assert "primes below 2000000: 148933" in res.stdout


@pytest.mark.requires_bpf
def test_packet_demo_runs_and_agrees_with_reference() -> None:
    res = capsule("demo", "--packet")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all verdicts match the reference" in res.stdout
    assert "XDP_DROP" in res.stdout and "processed" in res.stdout


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    good = compile_bpf(EXAMPLE).read_bytes()
    files = {
        "truncated": good[: len(good) // 3],
        "not-elf": b"this is not an object file\n",
        "empty": b"",
    }
    out = {}
    for name, data in files.items():
        p = tmp_path / f"{name}.o"
        p.write_bytes(data)
        out[name] = p
    out["x86-elf"] = Path(sys.executable).resolve()
    out["missing"] = tmp_path / "does-not-exist.o"
    return out


@pytest.mark.parametrize("kind", ["truncated", "not-elf", "empty", "x86-elf", "missing"])
@pytest.mark.parametrize("command", ["verify", "disasm"])
def test_bad_input_is_a_clear_error(kind: str, command: str, tmp_path: Path) -> None:
    path = _bad_inputs(tmp_path)[kind]
    res = capsule(command, str(path))
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("capsule: "), res.stderr
    assert str(path) in res.stderr


def test_help_lists_commands() -> None:
    res = capsule("--help")
    assert res.returncode == 0
    for word in ("disasm", "verify", "demo"):
        assert word in res.stdout
