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


def test_disasm_prints_what_llvm_objdump_prints_with_relocations_named() -> None:
    obj = compile_bpf(EXAMPLE)
    res = capsule("disasm", str(obj))
    assert res.returncode == 0, res.stderr
    dump = subprocess.run(
        ["llvm-objdump-19", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    ours = res.stdout.splitlines()
    theirs = dump.splitlines()
    assert len(ours) == len(theirs) > 40
    # the only difference: a relocated instruction names its target (the map, the kfunc, the subprogram)
    named = [(o, t) for o, t in zip(ours, theirs, strict=True) if o != t]
    assert named and all(o.startswith(t + " <") and o.endswith(">") for o, t in named), named
    assert any(re.search(r"= 0x0 ll <\w+>$", o) for o, _ in named)


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


TEXT_ONLY = "int func(void *ctx) { return ((int *)ctx)[0] + 1; }\n"  # no SEC(): a .text function, no program


@pytest.mark.parametrize("json_out", [False, True])
def test_verify_without_a_loadable_program_says_so(json_out: bool) -> None:
    obj = compile_bpf(TEXT_ONLY, "v3")
    res = capsule("verify", str(obj), *(["--json"] if json_out else []))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"capsule: {obj}: no program to load") and "'func'" in res.stderr
