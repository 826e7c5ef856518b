"""Loading BPF programs, reading their info, and running them with BPF_PROG_TEST_RUN.

``Program.load`` is BPF_PROG_LOAD with the verifier log handled the way a developer wants it: no log cost when
all goes well and none was asked for; on rejection the load is repeated with a log so the ``VerifierError``
always explains itself; a log that did not fit (ENOSPC) is retried at the size the kernel reports. With a log
level, the verifier's closing statistics are parsed into ``Program.stats``.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from capsule.bpf.insn import Insn, encode
from capsule.bpf.spec import FuncInfo, LineInfo
from capsule.bpf.uapi import ProgType
from capsule.ints import signed

from .consts import STATS_RUN_TIME, Cmd, LogLevel
from .errors import VerifierError
from .sys import (
    FD,
    Owner,
    ProgInfo,
    ProgLoadAttr,
    TestRunAttr,
    addr,
    bpf,
    bpf_errno,
    enable_stats,
    get_fd_by_id,
    name_bytes,
    obj_get_info,
)
from .verifier_log import VerifierStats, parse_stats

_FUNC_INFO = struct.Struct("<II")  # struct bpf_func_info
_LINE_INFO = struct.Struct("<IIII")  # struct bpf_line_info: insn_off, file_name_off, line_off, line_col
_LOG_DEFAULT = 1 << 16
_LOG_MAX = (1 << 30) - 1  # the kernel refuses log_size above UINT_MAX >> 2


@dataclass
class TestRunResult:
    """What BPF_PROG_TEST_RUN returned: the program's return value (``retval``, unsigned 32 bits), the
    packet after the run, the context after the run (for SYSCALL programs: the ctx buffer the program could
    write), and the mean duration per repeat in ns (0 for SYSCALL programs)."""

    __test__ = False  # not a pytest class

    retval: int
    data_out: bytes
    ctx_out: bytes | None
    duration_ns: int

    @property
    def retval_signed(self) -> int:
        return signed(self.retval, 32)


@dataclass
class ProgramInfo:
    """The useful part of ``struct bpf_prog_info``."""

    id: int
    type: int
    name: str
    tag: str
    verified_insns: int
    xlated_prog_len: int
    jited_prog_len: int
    run_time_ns: int
    run_cnt: int
    recursion_misses: int
    btf_id: int
    map_ids: list[int]
    load_time: int
    gpl_compatible: bool


def _func_info_bytes(infos: Sequence[FuncInfo] | bytes) -> bytes:
    if isinstance(infos, bytes | bytearray):
        return bytes(infos)
    return b"".join(_FUNC_INFO.pack(f.insn_off, f.type_id) for f in infos)


def _line_info_bytes(infos: Sequence[LineInfo] | bytes) -> bytes:
    if isinstance(infos, bytes | bytearray):
        return bytes(infos)
    return b"".join(_LINE_INFO.pack(li.insn_off, li.file_name_off, li.line_off, li.line << 10 | li.col)
                    for li in infos)


def _buf(data: bytes) -> ctypes.Array[ctypes.c_char] | None:
    return ctypes.create_string_buffer(data, len(data)) if data else None


class Program(Owner):
    """A loaded, verified program. Owns its FD (``close()`` or ``with``)."""

    def __init__(self, fd: FD, type: int, name: str = "", log: str = "",
                 stats: VerifierStats | None = None) -> None:
        self._fd = fd
        self.type = ProgType(type)
        self.name = name
        self.log = log  # the verifier log, when a log level was asked for
        self.stats = stats  # parsed from ``log``

    @classmethod
    def load(
        cls,
        type: int,
        insns: Sequence[Insn] | bytes,
        *,
        license: str = "GPL",
        name: str = "",
        log_level: int = 0,
        log_size: int = 0,
        expected_attach_type: int = 0,
        attach_btf_id: int = 0,
        attach_btf_obj_fd: FD | int | None = None,
        attach_prog_fd: FD | int | None = None,
        prog_flags: int = 0,
        prog_btf_fd: FD | int | None = None,
        func_info: Sequence[FuncInfo] | bytes = (),
        line_info: Sequence[LineInfo] | bytes = (),
        fd_array: Sequence[FD | int] | None = None,
        bind_fd_array: bool = False,
        prog_ifindex: int = 0,
    ) -> Program:
        """BPF_PROG_LOAD.

        ``insns`` is a list of ``Insn`` (refs already resolved) or encoded bytes. ``log_level`` combines
        ``LogLevel`` bits (1 branches, 2 every insn, 4 stats). ``func_info``/``line_info`` need
        ``prog_btf_fd``. ``fd_array`` serves ``Pseudo.MAP_IDX`` loads and module kfuncs; with
        ``bind_fd_array`` every map in it is bound to the program (fd_array_cnt, Linux 6.14+).
        Raises ``VerifierError`` (with the log) when the kernel refuses the program.
        """
        code = insns if isinstance(insns, bytes | bytearray) else encode(list(insns))
        if len(code) % 8 or not code:
            raise ValueError(f"program {name!r}: instruction bytes must be a non-empty multiple of 8")
        code_buf = ctypes.create_string_buffer(bytes(code), len(code))
        lic = ctypes.create_string_buffer(license.encode())
        fi = _buf(_func_info_bytes(func_info))
        li = _buf(_line_info_bytes(line_info))
        fds = None
        if fd_array:
            fds = (ctypes.c_int32 * len(fd_array))(*(int(f) for f in fd_array))
        attach_fd = attach_btf_obj_fd if attach_btf_obj_fd is not None else attach_prog_fd

        def attempt(level: int, size: int) -> tuple[int, int, ProgLoadAttr, ctypes.Array[ctypes.c_char] | None]:
            log = ctypes.create_string_buffer(size) if level else None
            attr = ProgLoadAttr(
                prog_type=int(type), insn_cnt=len(code) // 8, insns=addr(code_buf), license=addr(lic),
                log_level=int(level), log_size=size if level else 0, log_buf=addr(log),
                prog_flags=int(prog_flags), prog_name=name_bytes(name), prog_ifindex=prog_ifindex,
                expected_attach_type=int(expected_attach_type),
                prog_btf_fd=int(prog_btf_fd) if prog_btf_fd is not None else 0,
                func_info_rec_size=_FUNC_INFO.size if fi is not None else 0, func_info=addr(fi),
                func_info_cnt=len(fi) // _FUNC_INFO.size if fi is not None else 0,
                line_info_rec_size=_LINE_INFO.size if li is not None else 0, line_info=addr(li),
                line_info_cnt=len(li) // _LINE_INFO.size if li is not None else 0,
                attach_btf_id=attach_btf_id, attach_prog_fd=int(attach_fd) if attach_fd is not None else 0,
                fd_array=addr(fds), fd_array_cnt=len(fds) if (fds is not None and bind_fd_array) else 0,
            )
            fd, err = bpf_errno(Cmd.PROG_LOAD, attr)
            for _ in range(4):  # EAGAIN: the verifier was interrupted; libbpf retries the same way
                if err != errno.EAGAIN:
                    break
                fd, err = bpf_errno(Cmd.PROG_LOAD, attr)
            return fd, err, attr, log

        level = int(log_level)
        size = log_size or (_LOG_DEFAULT << 4 if level & LogLevel.INSNS else _LOG_DEFAULT)
        retried_for_log = False
        while True:
            fd, err, attr, log = attempt(level, size)
            text = log.value.decode(errors="replace") if log is not None else ""
            if fd >= 0:
                return cls(FD(fd), type, name, text, parse_stats(text) if level else None)
            if err == errno.ENOSPC and level and size < _LOG_MAX:
                # the log did not fit; the kernel says how big it would be (6.4+), else double
                size = min(max(attr.log_true_size, size * 2), _LOG_MAX)
                continue
            if not level and not retried_for_log:
                level, size, retried_for_log = LogLevel.BRANCHES, _LOG_DEFAULT, True
                continue
            tname = ProgType(type).label
            raise VerifierError(err, f"loading {tname} program {name!r} ({len(code) // 8} insns)", text)

    @classmethod
    def from_id(cls, prog_id: int) -> Program:
        """Open a program the kernel knows by id (e.g. one loaded by another process)."""
        fd = get_fd_by_id(Cmd.PROG_GET_FD_BY_ID, prog_id)
        info = ProgInfo()
        obj_get_info(fd, info)
        return cls(fd, info.type, info.name.decode(errors="replace"))

    def __repr__(self) -> str:
        return f"<Program {self.name!r} {self.type.name} fd={self._fd!r}>"

    # -- introspection -----------------------------------------------------------------------------------
    def info(self) -> ProgramInfo:
        raw = ProgInfo()
        obj_get_info(self._fd, raw)
        map_ids: list[int] = []
        if raw.nr_map_ids:
            ids = (ctypes.c_uint32 * raw.nr_map_ids)()
            again = ProgInfo(nr_map_ids=raw.nr_map_ids, map_ids=addr(ids))
            obj_get_info(self._fd, again)
            map_ids = list(ids)
        return ProgramInfo(
            id=raw.id, type=raw.type, name=raw.name.decode(errors="replace"), tag=bytes(raw.tag).hex(),
            verified_insns=raw.verified_insns, xlated_prog_len=raw.xlated_prog_len,
            jited_prog_len=raw.jited_prog_len, run_time_ns=raw.run_time_ns, run_cnt=raw.run_cnt,
            recursion_misses=raw.recursion_misses, btf_id=raw.btf_id, map_ids=map_ids,
            load_time=raw.load_time, gpl_compatible=bool(raw.gpl_compatible & 1),
        )

    def xlated(self) -> bytes:
        """The program as the kernel rewrote it (after verifier fixups and inlining), as instruction bytes."""
        first = ProgInfo()
        obj_get_info(self._fd, first)
        buf = ctypes.create_string_buffer(max(first.xlated_prog_len, 1))
        again = ProgInfo(xlated_prog_len=first.xlated_prog_len, xlated_prog_insns=addr(buf))
        obj_get_info(self._fd, again)
        return buf.raw[: again.xlated_prog_len]

    # -- running -----------------------------------------------------------------------------------------
    def test_run(self, data_in: bytes = b"", ctx_in: bytes | None = None, *, repeat: int = 1,
                 data_size_out: int | None = None, ctx_size_out: int | None = None, flags: int = 0,
                 cpu: int = 0, batch_size: int = 0) -> TestRunResult:
        """BPF_PROG_TEST_RUN once (or ``repeat`` times) on a packet and/or a context.

        SYSCALL programs take only a context: the kernel runs them once and writes the context back into
        the input buffer, which is returned as ``ctx_out``.
        """
        syscall = self.type == ProgType.SYSCALL
        din = _buf(bytes(data_in))
        cin = _buf(bytes(ctx_in)) if ctx_in is not None else None
        if syscall:
            if data_in or repeat > 1:
                raise ValueError("SYSCALL programs run once, on a context only (no data_in, repeat 1)")
            attr = TestRunAttr(prog_fd=self.fileno(), ctx_in=addr(cin),
                               ctx_size_in=len(cin) if cin is not None else 0, flags=flags, cpu=cpu)
            bpf(Cmd.PROG_TEST_RUN, attr, f"test-running {self.name!r}")
            return TestRunResult(attr.retval, b"", cin.raw if cin is not None else None, attr.duration)
        if data_size_out is None:
            data_size_out = len(data_in) + 4096 if data_in else 0
        dout = ctypes.create_string_buffer(data_size_out) if data_size_out else None
        if ctx_size_out is None:
            ctx_size_out = len(cin) if cin is not None else 0
        cout = ctypes.create_string_buffer(ctx_size_out) if ctx_size_out else None
        attr = TestRunAttr(
            prog_fd=self.fileno(), data_in=addr(din), data_size_in=len(data_in), data_out=addr(dout),
            data_size_out=data_size_out, ctx_in=addr(cin), ctx_size_in=len(cin) if cin is not None else 0,
            ctx_out=addr(cout), ctx_size_out=ctx_size_out, repeat=repeat, flags=flags, cpu=cpu,
            batch_size=batch_size,
        )
        bpf(Cmd.PROG_TEST_RUN, attr, f"test-running {self.name!r}")
        data = dout.raw[: attr.data_size_out] if dout is not None else b""
        ctx = cout.raw[: attr.ctx_size_out] if cout is not None else None
        return TestRunResult(attr.retval, data, ctx, attr.duration)


@contextmanager
def bpf_stats() -> Iterator[FD]:
    """Enable BPF_STATS_RUN_TIME (``run_time_ns``/``run_cnt`` in ``Program.info()``) for the ``with`` block.

    The kernel keeps stats on while any such FD is open, so nesting and other processes compose.
    """
    fd = enable_stats(STATS_RUN_TIME)
    try:
        yield fd
    finally:
        fd.close()
