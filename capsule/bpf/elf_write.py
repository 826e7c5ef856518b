"""Write an ``ObjectSpec`` as a standard relocatable BPF ELF object that libbpf, bpftool and capsule all load.

The object looks like clang's: subprograms in ``.text``, each program's entry function in its section
(programs sharing a section are concatenated), ``.rel<section>`` relocations for calls, maps, global data and
kfuncs, BTF-defined maps in ``.maps``, global data sections, ``license``, ``.BTF`` and ``.BTF.ext``.

Programs arrive linked (entry + reachable subprograms, calls as relative offsets), so writing undoes the link:
function boundaries come from func_info, call targets and ``Insn.sym``; a subprogram shared by several
programs is written once (same name and same code), and every call becomes a relocation against its callee's
symbol. Missing BTF is synthesized: FUNC/FUNC_PROTO per function, map definition structs, DATASECs for data,
and kfunc prototypes copied from the running kernel's BTF.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from capsule.files import write_whole
from capsule.ints import signed

from .btf import BTF, VMLINUX, BTFError, Linkage
from .btf_ext import BTFExt
from .btf_types import Datasec, Func, Var, VarSecinfo
from .elf_btfgen import data_section_vars, kfunc_type, map_def_var, program_func_type, subprog_func_type
from .elf_format import R_BPF_64_32, R_BPF_64_64, STB_LOCAL, ElfBuilder, Section, Symbol
from .elf_sections import section_for
from .insn import SLOT, Insn, slot_offsets
from .opcodes import LD_IMM64, CallKind, Class, Jmp, Pseudo
from .spec import FuncInfo, LineInfo, MapSpec, ObjectSpec, ProgramSpec

__all__ = ["WriteError", "write_object", "object_bytes"]

_CALL = Class.JMP | Jmp.CALL


class WriteError(ValueError):
    """The object cannot be written as an ELF file (a reference the format has no way to say, an empty program)."""


def write_object(spec: ObjectSpec, path: str | Path) -> None:
    """Write the object whole (under a temporary name, renamed into place): never half an object at ``path``."""
    write_whole(path, object_bytes(spec))


@dataclass
class _Fn:
    """One function cut out of a linked program."""

    name: str
    insns: list[Insn]
    type_id: int  # BTF FUNC, 0 until known
    line_infos: list[LineInfo]
    callees: dict[int, str] = field(default_factory=dict)  # insn index -> callee function name
    # _canonical, computed when a function of the same name is met (None: not yet, or its callees changed)
    key: tuple[tuple[int, int, int, int, int | str, str | None], ...] | None = None


def _is_data_map(m: MapSpec) -> bool:
    return m.section is not None or m.name.startswith(".")


class _Writer:
    def __init__(self, spec: ObjectSpec) -> None:
        self.spec = spec
        self.btf = spec.btf.copy() if isinstance(spec.btf, BTF) else BTF()
        self._vmlinux: BTF | None = None
        self.text: list[_Fn] = []
        self.text_names: dict[str, _Fn] = {}
        self.sections: dict[str, list[_Fn]] = {}  # program section -> entry functions

    # -- cutting programs into functions --------------------------------------------------------------
    def _split(self, prog: ProgramSpec) -> list[_Fn]:
        insns = prog.insns
        if not insns:
            raise WriteError(f"program {prog.name} has no instructions")
        offs = slot_offsets(insns)
        index_of = {o: i for i, o in enumerate(offs)}
        starts = {0} | {fi.insn_off for fi in prog.func_infos}
        targets: dict[int, int] = {}
        for i, ins in enumerate(insns):  # plain reads: this loop sees every instruction
            code = ins.code
            if (code == _CALL and ins.src == CallKind.BPF) or (code == LD_IMM64 and ins.src == Pseudo.FUNC):
                rel = ins.imm if code == _CALL else signed(ins.imm, 32)
                t = offs[i] + rel + 1
                if t not in index_of:
                    raise WriteError(
                        f"program {prog.name}: call at insn {i} targets slot {t}, not an instruction"
                    )
                targets[i] = t
                starts.add(t)
        bounds = sorted(starts)
        fi_by_off = {fi.insn_off: fi.type_id for fi in prog.func_infos}
        fns: list[_Fn] = []
        name_at: dict[int, str] = {}
        for n, start in enumerate(bounds):
            end = bounds[n + 1] if n + 1 < len(bounds) else offs[-1] + insns[-1].slots()
            lo = index_of[start]
            hi = index_of.get(end, len(insns))
            tid = fi_by_off.get(start, 0)
            if start == 0:
                name = prog.name
            elif tid and isinstance(func := self.btf.type_by_id(tid), Func):
                name = func.name
            elif sym := insns[lo].sym:
                name = sym
            else:
                name = f"{prog.name}__sub{start}"
            lines = [
                replace(li, insn_off=li.insn_off - start)
                for li in prog.line_infos
                if start <= li.insn_off < end
            ]
            # the program's own instructions, shared: writing reads them and never changes them
            fns.append(_Fn(name, insns[lo:hi], tid, lines))
            name_at[start] = name
        # callee names, once every function (forward targets included) has one
        for fn, start in zip(fns, bounds, strict=True):
            base = index_of[start]
            fn.callees = {i: name_at[targets[base + i]] for i in range(len(fn.insns)) if base + i in targets}
        return fns

    @staticmethod
    def _canonical(fn: _Fn) -> tuple[tuple[int, int, int, int, int | str, str | None], ...]:
        if fn.key is None:
            callees = fn.callees
            fn.key = tuple(
                (i.code, i.dst, i.src, i.off, callees[k] if k in callees else i.imm, i.ref)
                for k, i in enumerate(fn.insns)
            )
        return fn.key

    def _collect(self) -> None:
        for prog in self.spec.programs.values():
            fns = self._split(prog)
            renames: dict[str, str] = {}
            for fn in fns[1:]:
                have = self.text_names.get(fn.name)
                if have is not None and self._canonical(have) != self._canonical(fn):
                    new = fn.name
                    n = 1
                    while new in self.text_names:
                        new, n = f"{fn.name}__{n}", n + 1
                    renames[fn.name] = new
                    fn.name = new
            if renames:
                for fn in fns:
                    fn.callees = {k: renames.get(v, v) for k, v in fn.callees.items()}
                    fn.key = None
            for fn in fns[1:]:
                if fn.name not in self.text_names:
                    self.text_names[fn.name] = fn
                    self.text.append(fn)
            self.sections.setdefault(prog.section or self._section_for(prog), []).append(fns[0])
            if fns[0].type_id == 0:
                fns[0].type_id = program_func_type(self.btf, prog.name)
        for fn in self.text:
            if fn.type_id == 0:
                fn.type_id = subprog_func_type(self.btf, fn.name)

    # -- assembling -----------------------------------------------------------------------------------
    def vmlinux(self) -> BTF:
        if self._vmlinux is None:
            try:
                self._vmlinux = BTF.load_vmlinux(VMLINUX)
            except OSError as e:
                raise WriteError(f"kfunc prototypes need {VMLINUX}: {e.strerror}") from None
        return self._vmlinux

    def build(self) -> bytes:
        self._collect()
        spec, btf = self.spec, self.btf
        elf = ElfBuilder()
        maps = [m for m in spec.maps.values() if not _is_data_map(m)]
        data_maps = [m for m in spec.maps.values() if _is_data_map(m)]

        # code sections (relocations are filled in below, once every symbol exists)
        code: list[tuple[Section, list[_Fn]]] = []
        if self.text:
            code.append((elf.add_section(".text", "code"), self.text))
        for name, fns in self.sections.items():
            code.append((elf.add_section(name, "code"), fns))
        fn_sym: dict[str, Symbol] = {}
        ext = BTFExt()
        for sec, fns in code:
            pos = 0
            for fn in fns:
                fdef = btf.type_by_id(fn.type_id)
                glob = not isinstance(fdef, Func) or fdef.linkage != Linkage.STATIC or sec.name != ".text"
                size = sum(i.slots() for i in fn.insns) * SLOT
                sym = elf.add_symbol(fn.name, sec, pos, size, "func", glob)
                if sec.name != ".text" or fn.name not in fn_sym:
                    fn_sym.setdefault(fn.name, sym)
                ext.func_info.setdefault(sec.name, []).append(FuncInfo(pos // SLOT, fn.type_id))
                if fn.line_infos:
                    ext.line_info.setdefault(sec.name, []).extend(
                        replace(li, insn_off=li.insn_off + pos // SLOT) for li in fn.line_infos
                    )
                pos += size

        # .maps
        map_sym: dict[str, Symbol] = {}
        if maps:
            msec = elf.add_section(".maps", "maps")
            old = _datasec(btf, ".maps")
            old_vars = {}
            if old is not None:
                for vs in old.vars:
                    v = btf.type_by_id(vs.type)
                    if isinstance(v, Var):
                        old_vars[v.name] = vs.type
            entries = []
            off = 0
            for m in maps:
                vid = old_vars.get(m.name) or map_def_var(btf, m, from_spec_btf=isinstance(spec.btf, BTF))
                size = btf.size_of(vid)
                map_sym[m.name] = elf.add_symbol(m.name, msec, off, size, "object", True)
                entries.append((vid, off, size))
                off += size
            msec.data = bytes(off)
            _set_datasec(btf, ".maps", off, entries)

        # global data
        data_sym: dict[str, Section] = {}
        for m in data_maps:
            name = m.section or m.name
            contents = m.contents if m.contents is not None else bytes(m.value_size)
            kind = "bss" if name.startswith(".bss") else ("rodata" if name.startswith(".rodata") else "data")
            dsec = elf.add_section(name, kind, contents)
            data_sym[m.name] = dsec
            for vname, off, size in data_section_vars(btf, name, len(contents)):
                elf.add_symbol(vname, dsec, off, size, "object", True)

        lic = elf.add_section("license", "data", spec.license.encode() + b"\0")
        elf.add_symbol("LICENSE", lic, 0, len(spec.license) + 1, "object", True)

        # instructions and relocations
        externs: dict[str, Symbol] = {}
        for sec, fns in code:
            out: list[bytes] = []
            pos = 0
            for fn in fns:
                callees = fn.callees
                for k, ins in enumerate(fn.insns):  # the writer's hot loop: most instructions are written as is
                    opcode = ins.code
                    if opcode == _CALL or opcode == LD_IMM64 or k in callees:
                        ins, rel = self._relocate(fn, k, ins, fn_sym, map_sym, data_sym, externs, elf)
                        if rel is not None:
                            sec.relocs.append((pos, rel[0], rel[1]))
                        out.append(ins.encode())
                        pos += ins.slots() * SLOT
                    else:
                        out.append(ins.encode())
                        pos += SLOT
            sec.data = b"".join(out)

        if externs:
            ksyms = [(self._kfunc_btf(name), 0, 0) for name in externs]
            have_ksyms = _datasec(btf, ".ksyms")
            if have_ksyms is None:
                _set_datasec(btf, ".ksyms", 0, ksyms)
            else:
                have = {vs.type for vs in have_ksyms.vars}
                have_ksyms.vars.extend(VarSecinfo(t, 0, 0) for t, _, _ in ksyms if t not in have)

        ext_bytes = ext.encode(btf.strings)  # first: it adds section names to the BTF string table
        elf.add_section(".BTF", "btf", btf.encode())
        elf.add_section(".BTF.ext", "btf", ext_bytes)
        for name, data in spec.extra_sections.items():
            elf.add_section(name, "note", data)
        return elf.encode()

    def _kfunc_btf(self, name: str) -> int:
        for tid in self.btf.find_ids(name):
            f = self.btf.type_by_id(tid)
            if isinstance(f, Func):
                f.linkage = Linkage.EXTERN
                return tid
        try:
            return kfunc_type(self.btf, self.vmlinux(), name)
        except BTFError:
            raise
        except ValueError as e:  # a kfunc this kernel does not have: its prototype cannot be written
            raise WriteError(str(e)) from None

    @staticmethod
    def _section_for(prog: ProgramSpec) -> str:
        try:
            return section_for(prog.type, prog.expected_attach_type, prog.flags, prog.attach_to)
        except ValueError as e:  # a program of no known type and no section name to keep
            raise WriteError(f"program {prog.name!r}: {e}") from None

    def _relocate(self, fn: _Fn, k: int, ins: Insn, fn_sym: dict[str, Symbol], map_sym: dict[str, Symbol],
                  data_sym: dict[str, Section], externs: dict[str, Symbol],
                  elf: ElfBuilder) -> tuple[Insn, tuple[Symbol, int] | None]:
        """The instruction as written in the object, and (symbol, relocation type) if it needs one."""
        if k in fn.callees:
            # like clang: a global callee through its own symbol, a static one through the section symbol plus
            # its offset (libbpf accepts function addresses only in these two forms)
            sym = fn_sym[fn.callees[k]]
            off = 0
            if sym.bind == STB_LOCAL:
                assert sym.section is not None  # a function defined in this object
                sym, off = elf.section_symbol(sym.section), sym.value
            if ins.is_call:
                return replace(ins, src=CallKind.BPF, imm=off // SLOT - 1, ref=None, sym=None), (
                    sym,
                    R_BPF_64_32,
                )
            return replace(ins, imm=off, ref=None, sym=None), (sym, R_BPF_64_64)
        if ins.is_call and ins.src == CallKind.KFUNC:
            if not ins.ref:
                raise WriteError(f"{fn.name}: kfunc call without a name (ref)")
            sym = externs.get(ins.ref) or elf.add_symbol(ins.ref, None, 0, 0, "notype", True)
            externs[ins.ref] = sym
            return replace(ins, src=CallKind.BPF, imm=-1, ref=None, sym=None), (sym, R_BPF_64_32)
        if ins.is_ld_imm64 and ins.src == Pseudo.MAP_FD:
            if ins.ref not in map_sym:
                raise WriteError(f"{fn.name}: reference to unknown map {ins.ref!r}")
            return replace(ins, src=0, imm=0, ref=None, sym=None), (map_sym[ins.ref], R_BPF_64_64)
        if ins.is_ld_imm64 and ins.src == Pseudo.MAP_VALUE:
            if ins.ref not in data_sym:
                raise WriteError(
                    f"{fn.name}: MAP_VALUE reference to {ins.ref!r}, which is not a global data map"
                )
            sec = data_sym[ins.ref]
            return replace(ins, src=0, imm=(ins.imm >> 32) & 0xFFFFFFFF, ref=None, sym=None), (
                elf.section_symbol(sec),
                R_BPF_64_64,
            )
        if ins.ref and (ins.is_call or ins.is_ld_imm64):
            raise WriteError(f"{fn.name}: cannot write a symbolic reference {ins!r}")
        return ins, None  # written as is (encoding ignores ref and sym)


def object_bytes(spec: ObjectSpec) -> bytes:
    """The ELF object for ``spec`` as bytes."""
    try:
        return _Writer(spec).build()
    except BTFError as e:
        raise WriteError(f"cannot write object: {e}") from None


def _datasec(btf: BTF, name: str) -> Datasec | None:
    ids = btf.find_ids(name, Datasec.kind)
    if not ids:
        return None
    ds = btf.type_by_id(ids[0])
    assert isinstance(ds, Datasec)  # find_ids looked for that kind
    return ds


def _set_datasec(btf: BTF, name: str, size: int, entries: list[tuple[int, int, int]]) -> None:
    ds = _datasec(btf, name)
    if ds is None:
        btf.add_datasec(name, size, entries)
    else:
        ds.size, ds.vars = size, [VarSecinfo(*e) for e in entries]


