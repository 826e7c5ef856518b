"""ObjectSpec -> live maps and programs: libbpf-style objects compiled by clang-19 load and run as they would
under libbpf (maps, global data, .rodata frozen, subprograms, kfuncs, arenas)."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from capsule.bpf.elf import read_object
from capsule.bpf.opcodes import Pseudo
from capsule.kernel.collection import Collection, LoadError
from capsule.kernel.errors import VerifierError
from tests.clang import CORPUS, compile_bpf

pytestmark = pytest.mark.requires_bpf

EXAMPLES = Path(__file__).resolve().parents[2] / "capsule" / "examples"


def _min_cpu(src: Path) -> str:
    for line in src.read_text().splitlines():
        if "capsule-corpus:" in line:
            return line.split("capsule-corpus:")[1].strip()
    return "v2"


def _builds() -> list[tuple[Path, str]]:
    out = []
    for src in sorted(CORPUS.glob("*.c")):
        low = _min_cpu(src)
        out += [(src, cpu) for cpu in ("v2", "v3", "v4") if cpu >= low]
    return out


@pytest.mark.parametrize("src,cpu", _builds(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_every_corpus_object_loads(src: Path, cpu: str) -> None:
    spec = read_object(compile_bpf(src, cpu))
    assert spec.programs, "the corpus object has no programs"
    with Collection.load(spec) as coll:
        assert set(coll.programs) == set(spec.programs)
        for prog in coll.programs.values():
            assert prog.info().verified_insns > 0


def _globals_model(ctx: tuple[int, int, int, int, int]) -> tuple[int, int, dict[str, int]]:
    """syscall_globals.c computed in Python: (return value, ctx->result, new globals)."""
    a, b, c, d, e = ctx
    m64 = (1 << 64) - 1
    g = {"g8": 0x12, "g16": 0x3456, "g32": 0x789ABCDE, "g64": 0x0123456789ABCDEF}
    seed = 0xFEEDFACECAFEBEEF
    g["g8"] = (g["g8"] + d) & 0xFF
    g["g16"] ^= c
    g["g32"] = (g["g32"] * 33 + b) & 0xFFFFFFFF
    g["g64"] = (((g["g64"] << 7) | (g["g64"] >> 57)) & m64) ^ seed ^ a
    s = -3 - 300 - 70000 + e
    result = -(s + (g["g64"] & 0xFFFFFFFFFF) + 0x1122334455667788)
    result = (result + (1 << 63)) % (1 << 64) - (1 << 63)
    ret = -(g["g32"] & 0x7FFFFFFF)
    return ret, result, g


def test_global_data_roundtrip_against_model() -> None:
    spec = read_object(compile_bpf(CORPUS / "syscall_globals.c"))
    ctx_args = (0x1122334455667788, 0xDEADBEEF, 0xBEEF, 0x7F, -5)
    ctx = struct.pack("<QIHBbq", *ctx_args, 0)
    with Collection.load(spec) as coll:
        res = coll.programs["syscall_globals"].test_run(ctx_in=ctx)
        ret, result, g = _globals_model(ctx_args)
        assert res.retval_signed == ret
        assert struct.unpack_from("<q", res.ctx_out, 16)[0] == result
        assert int.from_bytes(coll.read_global("g64"), "little") == g["g64"]
        assert int.from_bytes(coll.read_global("g8"), "little") == g["g8"]
        assert int.from_bytes(coll.read_global("counter"), "little") == 1
        a = ctx_args[0]
        assert coll.read_global("bytes") == bytes(((a >> (i % 8 * 8)) + i) & 0xFF for i in range(16))
        # Python writes a global, the program reads it on the next run
        coll.write_global("counter", (41).to_bytes(8, "little"))
        coll.programs["syscall_globals"].test_run(ctx_in=ctx)
        assert int.from_bytes(coll.read_global("counter"), "little") == 42


def test_rodata_is_frozen_and_can_be_set_before_load() -> None:
    spec = read_object(compile_bpf(EXAMPLES / "packet_stats.bpf.c"))
    from capsule.demo.packet import _udp

    with Collection.load(spec, rodata={".rodata": struct.pack("<H", 53)}) as coll:
        prog = coll.programs["packet_stats"]
        assert prog.test_run(_udp(53, b"q")).retval == 1  # XDP_DROP: the port set through .rodata
        assert prog.test_run(_udp(9999, b"q")).retval == 2
        with pytest.raises(OSError):  # frozen: not writable from user space any more
            coll.maps[".rodata"].update(0, b"\0\0")


def test_unknown_map_reference_is_a_load_error() -> None:
    spec = read_object(compile_bpf(EXAMPLES / "packet_stats.bpf.c"))
    ps = spec.programs["packet_stats"]
    insns = [
        replace(i, ref="no_such_map") if i.is_ld_imm64 and i.src == Pseudo.MAP_FD else i for i in ps.insns
    ]
    spec.programs["packet_stats"] = replace(ps, insns=insns)
    with pytest.raises(LoadError, match="no_such_map"):
        Collection.load(spec)


def test_rejected_program_names_the_instruction_and_reason() -> None:
    src = """
    #include <linux/bpf.h>
    #include <bpf/bpf_helpers.h>
    SEC("xdp")
    int unchecked(struct xdp_md *ctx)
    {
        unsigned char *data = (void *)(long)ctx->data;
        return data[20];          /* no check against data_end */
    }
    char LICENSE[] SEC("license") = "GPL";
    """
    spec = read_object(compile_bpf(src))
    with pytest.raises(VerifierError) as ei:
        Collection.load(spec)
    err = ei.value
    assert err.insn_index is not None
    assert "outside of the packet" in err.reason
    assert "r" in (err.insn_text or "")
    assert "unchecked" in str(err)
