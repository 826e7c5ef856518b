"""What a BPF object describes, before anything touches the kernel (cilium/ebpf's CollectionSpec).

``capsule.bpf.elf`` reads these from ELF, ``capsule.bpf.elf_write`` writes them to ELF, code generators build them
directly, and ``capsule.kernel.collection`` turns one into live maps and programs.

Symbolic references left in a program's instructions (``Insn.ref``) are resolved at load time:

- ``ld_imm64`` with ``src == Pseudo.MAP_FD``: ``ref`` names a map; the loader puts its fd in ``imm``.
- ``ld_imm64`` with ``src == Pseudo.MAP_VALUE``: ``ref`` names a map (a global data section such as ``.bss``
  is a map of one element); the high 32 bits of ``imm`` are the offset into its value, the loader sets the low
  32 bits to the map fd.
- ``call`` with ``src == CallKind.KFUNC``: ``ref`` names a kernel function; the loader puts its vmlinux BTF id in
  ``imm``.
- ``ld_imm64`` with ``src == Pseudo.BTF_ID``: ``ref`` names an extern variable (``ProgramSpec.externs`` says how to
  resolve it): a kernel variable's vmlinux BTF id or address, or a pointer into the ``.kconfig`` map.

Everything else (BPF-to-BPF calls, ``ld_imm64`` of a function, jumps) is already resolved to relative offsets in
``ProgramSpec.insns``, which holds the entry function followed by every subprogram it reaches.

Map and program types are ``MapType`` / ``ProgType`` members whoever builds the spec: the dataclasses convert a
plain number when they are made, so consumers compare and name them without checking. A number the enums do
not list (an object for a newer kernel) becomes a pseudo member that keeps it (``capsule.bpf.uapi``), so such
an object still reads, writes and loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .btf import BTF
from .insn import Insn
from .uapi import MapType, ProgType


@dataclass
class FuncInfo:
    """``.BTF.ext`` func_info: the function starting at slot ``insn_off`` has BTF FUNC type ``type_id``."""

    insn_off: int
    type_id: int


@dataclass
class LineInfo:
    """``.BTF.ext`` line_info: source position of the instruction at slot ``insn_off``."""

    insn_off: int
    file_name_off: int  # offsets into the BTF string table
    line_off: int
    line: int
    col: int


@dataclass
class MapSpec:
    name: str
    type: MapType
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0
    map_extra: int = 0
    # BTF type ids (in ObjectSpec.btf) of key and value, 0 when unknown
    btf_key_type_id: int = 0
    btf_value_type_id: int = 0
    # initial value of element 0 for global data maps (.data, .rodata, .bss) and sized contents
    contents: bytes | None = None
    # .rodata is frozen after it is filled, so the verifier may treat loads from it as constants
    freeze: bool = False
    # for global data: the ELF section it came from; the kernel map name is derived from it
    section: str | None = None
    # map-in-map (ARRAY_OF_MAPS, HASH_OF_MAPS): the inner maps' shape, ``__array(values, struct {...})``; the
    # loader creates it as the template the kernel wants (``inner_map_fd``)
    inner: MapSpec | None = None
    # initial slots of a map-in-map or PROG_ARRAY (``.values = { [2] = &m }``): index -> map or program name
    init_refs: dict[int, str] = field(default_factory=dict)
    # for ``.kconfig``: the extern variables it holds, filled from the running kernel at load time
    kconfig: list[KconfigVar] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.type = MapType(self.type)


@dataclass
class KconfigVar:
    """An ``extern ... __kconfig`` variable: where it sits in the ``.kconfig`` map and how it is stored."""

    name: str  # "CONFIG_HZ", "LINUX_KERNEL_VERSION"
    offset: int
    size: int
    kind: str  # "bool", "tristate", "char_array", "int", "uint"
    weak: bool = False  # may be missing from the kernel's config: then 0


@dataclass
class ExternVar:
    """An ``extern`` variable that a program's ``ld_imm64 src=BTF_ID ref=name`` loads the address of.

    ``kind`` says how the loader resolves it: ``"ksym"`` (``extern struct rq runqueues __ksym``): the kernel's
    BTF id of the variable; ``"kallsyms"`` (typeless, ``extern const void x __ksym``): its address from
    /proc/kallsyms; ``"kconfig"`` (``extern int CONFIG_HZ __kconfig``): a pointer ``offset`` bytes into the
    ``.kconfig`` map. A ``weak`` ksym the kernel lacks becomes 0."""

    name: str
    kind: str = "ksym"
    weak: bool = False
    offset: int = 0


@dataclass
class ProgramSpec:
    name: str  # the entry function's symbol name
    section: str  # ELF section, e.g. "xdp" or "syscall"
    type: ProgType
    insns: list[Insn]
    license: str = "GPL"
    expected_attach_type: int = 0
    attach_to: str = ""  # e.g. the tracepoint "syscalls/sys_enter_getpid"
    flags: int = 0  # BPF_F_SLEEPABLE etc.
    # False for SEC("?...") programs: libbpf loads them only when asked to by name
    autoload: bool = True
    # the extern variables (``__ksym``, ``__kconfig``) its ld_imm64 instructions name, by name
    externs: dict[str, ExternVar] = field(default_factory=dict)
    func_infos: list[FuncInfo] = field(default_factory=list)
    line_infos: list[LineInfo] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.type = ProgType(self.type)


@dataclass
class Reloc:
    """A relocation of one instruction of a code section, as the ELF file holds it."""

    type: int  # R_BPF_* (capsule.bpf.elf_format)
    symbol: str  # the symbol's name; for a section symbol, its section's name
    section: str | None  # the section the symbol is defined in; None when undefined (an extern, a kfunc)
    value: int = 0  # the symbol's value: its offset in ``section``
    section_symbol: bool = False  # STT_SECTION: the instruction's immediate says where in ``section`` it points


@dataclass
class CodeSection:
    """One code section before linking: its instructions as written and the relocations applied to them."""

    name: str
    insns: list[Insn]  # decoded from the section's bytes, immediates as written (``call -0x1``, ``r1 = 0x0 ll``)
    relocs: dict[int, Reloc] = field(default_factory=dict)  # slot -> relocation


@dataclass(frozen=True)
class Unplaced:
    """Code of the object that no program holds, so that loading the programs (or rewriting them) leaves it
    out: a ``.text`` function no program calls, or instructions no function symbol covers (objects from
    older clangs mark functions ``STT_NOTYPE``; libbpf, like capsule, takes only ``STT_FUNC`` symbols)."""

    section: str
    start: int  # slot
    end: int  # slot, exclusive
    function: str = ""  # the function's name; "" when no function symbol covers the code
    label: str = ""  # for uncovered code, a non-function symbol at its start, if any

    def __str__(self) -> str:
        if self.function:
            return f"function {self.function!r} in {self.section}, which no program calls"
        what = f" (symbol {self.label!r} is not STT_FUNC)" if self.label else ""
        return f"{self.section} slots {self.start}..{self.end - 1}, which no function symbol covers{what}"


@dataclass
class UnlinkedCode:
    """The object's code as its ELF file holds it, for tools that show the file rather than load it (the
    disassembler): ``ProgramSpec.insns`` are linked and resolved, these are not."""

    sections: list[CodeSection] = field(default_factory=list)  # in section header order
    # section name -> (byte offset, name) of every named symbol defined in it (functions, labels, variables,
    # maps), in symbol table order; section and file symbols are not listed
    symbols: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    # code no program holds (what rewriting the programs would lose), in section order
    unplaced: list[Unplaced] = field(default_factory=list)


@dataclass
class ObjectSpec:
    programs: dict[str, ProgramSpec] = field(default_factory=dict)
    maps: dict[str, MapSpec] = field(default_factory=dict)
    btf: BTF | None = None  # the object's own types (needed for func_info)
    license: str = "GPL"
    # non-allocated sections carried through unchanged, e.g. ".capsule.meta" (what the runtime needs to drive a
    # compiled program); loaders that do not know them ignore them
    extra_sections: dict[str, bytes] = field(default_factory=dict)
    # set by the ELF reader: the code as written. Writers and loaders ignore it; a transformation of the
    # programs must drop it (it would describe the code before the change)
    unlinked: UnlinkedCode | None = None
