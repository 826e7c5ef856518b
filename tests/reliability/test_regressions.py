"""Bugs the fuzzer and the hostile-object tests found outside the compiler, each kept from coming back: every one
was a Python traceback where a user should read one line."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from capsule.bpf.elf import ObjectError, read_object
from capsule.bpf.elf_write import WriteError, object_bytes, write_object
from capsule.bpf.uapi import ProgType
from tests.clang import CORPUS, compile_bpf

EXTERNS = Path(__file__).parents[1] / "bpf" / "elf_inputs" / "externs.c"
KFUNCS = Path(__file__).parents[1] / "bpf" / "elf_inputs" / "kfunc_arena.c"


def _capsule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsule.cli", *args], capture_output=True, text=True, timeout=300)


def _one_line(res: subprocess.CompletedProcess[str], words: str) -> None:
    assert res.returncode == 1 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("capsule: ") and words in res.stderr, res.stderr


def test_opt_of_an_object_with_extern_variables(tmp_path: Path) -> None:
    """The ELF writer cannot write extern variables (``__ksym``, ``__kconfig``) back yet: it says so."""
    res = _capsule("opt", "--no-check", str(compile_bpf(EXTERNS)), "-o", str(tmp_path / "out.o"))
    _one_line(res, "cannot write a symbolic reference")
    assert not (tmp_path / "out.o").exists()


def test_opt_of_code_the_optimizer_cannot_take_apart(tmp_path: Path) -> None:
    """An instruction naming r11 (fuzzer, elf input 254 of seed 15) ended the optimizer with a RewriteError."""
    spec = read_object(compile_bpf(CORPUS / "xdp_parse.c"))
    ps = next(iter(spec.programs.values()))
    ps.insns[0] = dataclasses.replace(ps.insns[0], dst=11)
    write_object(spec, tmp_path / "bad.o")
    _one_line(_capsule("opt", "--no-check", str(tmp_path / "bad.o"), "-o", str(tmp_path / "out.o")),
              "names a register above r10")


def test_run_of_a_file_that_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "x.bpf.o").write_bytes(b"\x7fELF" + bytes(60))
    _one_line(_capsule("run", str(tmp_path / "x.bpf.o")), "x.bpf.o")


def test_opt_of_an_object_calling_a_kfunc_this_kernel_lacks(tmp_path: Path) -> None:
    """A kfunc's name changed in the symbol table (fuzzer, elf input 207 of seed 1): writing the optimised object
    needs the kfunc's prototype from the kernel's BTF, which has none: one line, not a ValueError."""
    data = compile_bpf(KFUNCS).read_bytes()
    name = b"bpf_arena_free_pages"
    last = data.rindex(name)  # the symbol table's copy (the BTF's come first)
    bad = tmp_path / "bad.o"
    bad.write_bytes(data[:last] + b"bpf_arena_\x01ree_pages" + data[last + len(name):])
    _one_line(_capsule("opt", "--no-check", str(bad), "-o", str(tmp_path / "out.o")), "not a function in the kernel")


def _patched(obj: Path, patch: Callable[[bytes, ELFFile], tuple[int, bytes]]) -> bytes:
    data = obj.read_bytes()
    at, value = patch(data, ELFFile(io.BytesIO(data)))
    return data[:at] + value + data[at + len(value):]


def _section_header(elf: ELFFile, name: str) -> int:
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
    return int(elf.header["e_shoff"]) + index * int(elf.header["e_shentsize"])


def test_a_section_running_past_the_end_of_the_file(tmp_path: Path) -> None:
    """A section size of 2^47 (fuzzer, elf input 675 of seed 100) was believed: the license DATASEC got that size
    and writing it back failed in struct.pack."""
    data = _patched(compile_bpf(CORPUS / "xdp_parse.c"),
                    lambda d, elf: (_section_header(elf, "license") + 32, (1 << 47).to_bytes(8, "little")))
    with pytest.raises(ObjectError, match="section 'license' .* runs past the end of the file"):
        read_object(data)
    (tmp_path / "bad.o").write_bytes(data)
    _one_line(_capsule("disasm", str(tmp_path / "bad.o")), "runs past the end of the file")


def test_a_variable_outside_its_section(tmp_path: Path) -> None:
    """A global's symbol value of 2^56 (fuzzer, elf input 1771 of seed 100) became its DATASEC offset."""
    def patch(data: bytes, elf: ELFFile) -> tuple[int, bytes]:
        symtab = elf.get_section_by_name(".symtab")
        k = next(i for i, s in enumerate(symtab.iter_symbols())
                 if s["st_info"]["type"] == "STT_OBJECT" and s["st_shndx"] not in ("SHN_UNDEF", "SHN_ABS")
                 and elf.get_section(s["st_shndx"]).name in (".bss", ".data", ".rodata"))
        return int(symtab["sh_offset"]) + k * int(symtab["sh_entsize"]) + 8, (1 << 56).to_bytes(8, "little")

    with pytest.raises(ObjectError, match="lies outside the section"):
        read_object(_patched(compile_bpf(CORPUS / "syscall_globals.c"), patch))


def test_writing_a_program_of_no_known_type_without_a_section() -> None:
    """(fuzzer, elf input 2896 of seed 100) a program whose section name was lost and whose type is UNSPEC."""
    spec = read_object(compile_bpf(CORPUS / "xdp_parse.c"))
    ps = next(iter(spec.programs.values()))
    ps.section, ps.type = "", ProgType.UNSPEC
    with pytest.raises(WriteError, match="no conventional section name"):
        object_bytes(spec)


def test_a_name_subsection_running_past_its_section() -> None:
    """(fuzzer, wasm input 8459 of seed 2027, reduced to 25 bytes) an IndexError from the reader; now the
    module's own fault (its table's limits) is what it reports."""
    from capsule.wasm import WasmError, load

    with pytest.raises(WasmError, match="table size minimum"):
        load(bytes.fromhex("0061736d01000000040501700102010008046e616d65028100"))


def test_ctrl_c_while_the_commands_are_imported_is_status_130(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by test_kill_attach.py: SIGINT while ``main`` imported the commands' modules (building its parser)
    printed a KeyboardInterrupt traceback instead of ending with status 130."""
    import capsule.cli as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["run", "x.c"]) == 130
