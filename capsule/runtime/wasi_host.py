"""The host side of capsule's guest WASI runtime: place args, environment and files before the run, serve
output and input while it runs, and write changed files back after it.

The guest runtime (``capsule/guest/wasi``, linked into every C program capsule builds) serves WASI inside the
guest; it talks to the host only through a control block in guest memory (layout in
``capsule/guest/wasi/capsule_io.h``, mirrored by the ``IO_*`` offsets here) and the ``capsule.yield``
intrinsic. The host reads and writes guest memory in place: the kernel's window is mapped into this process
(``Instance.mem``), and under wasmtime (the differential reference) it is the module's memory.

A ``Guest`` is either engine; ``WasiHost`` is the same code for both, which is what makes the wasmtime run a
faithful reference for the kernel run.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from capsule.compiler import Options
    from capsule.runtime.instance import Instance

# the control block (capsule_io.h)
IO_MAGIC = 0x4F495343
IO_VERSION = 1
IO_SIZE = 96
IO_OUT_BUF, IO_OUT_CAP, IO_OUT_LEN = 8, 12, 16
IO_IN_BUF, IO_IN_CAP, IO_IN_LEN, IO_IN_POS, IO_IN_EOF = 20, 24, 28, 32, 36
IO_ARGC, IO_ARGV_BUF, IO_ARGV_SIZE = 40, 44, 48
IO_ENVC, IO_ENV_BUF, IO_ENV_SIZE = 52, 56, 60
IO_FLAGS, IO_TTY = 64, 68
IO_EXIT_CODE, IO_EXITED, IO_REASON, IO_YIELDS = 72, 76, 80, 84
IO_SLEEP_UNTIL = 88

FLUSH_EACH_WRITE = 1


class Reason:
    NONE, OUTPUT, INPUT, SLEEP, SCHED = 0, 1, 2, 3, 4


FILETYPE_DIRECTORY = 3
FILETYPE_REGULAR_FILE = 4
FS_ENTRY_SIZE = 16


class WasiError(Exception):
    """The host could not prepare or serve the guest (not a capsule program, a file it cannot place, ...)."""


class Guest(Protocol):
    """What WasiHost needs from an engine: guest memory, calls to exports, and running ``_start``."""

    def read(self, addr: int, size: int) -> bytes: ...

    def write(self, addr: int, data: bytes) -> None: ...

    def has_export(self, name: str) -> bool: ...

    def call(self, name: str, *args: int) -> int: ...

    def close(self) -> None: ...

    def run_start(self, service: Callable[[], None]) -> int | None:
        """Run ``_start``, calling ``service`` whenever the guest yields or the engine hands back control;
        return the exit code given to ``capsule.exit``, or None when ``_start`` returned."""
        ...


@dataclass
class WasiConfig:
    """What the guest sees: arguments (argv[0] included), environment, files, streams."""

    args: list[str] = field(default_factory=lambda: ["program"])
    env: list[str] = field(default_factory=list)  # "K=V"
    files: list[tuple[Path, str]] = field(default_factory=list)  # host file -> guest path
    dirs: list[tuple[Path, str]] = field(default_factory=list)  # host directory -> guest path
    stdin: bytes | BinaryIO | None = None
    stdout: BinaryIO | None = None  # default: this process's stdout
    stderr: BinaryIO | None = None
    out_dir: Path | None = None  # where files the guest created or changed are written after the run
    interactive: bool = False  # the guest yields after every write to stdout/stderr (for terminals)


def guest_path(host: Path, guest: str | None) -> str:
    """Where a --file/--dir appears in the guest: the given path, else the host path as written (relative
    paths resolve against the guest's working directory, the root)."""
    text = guest if guest is not None else str(host)
    return "/" + text.strip("/") if text.strip("/") else "/"


def parse_mapping(spec: str) -> tuple[Path, str]:
    """``HOST[:GUEST]`` as --file and --dir take it."""
    host, sep, guest = spec.partition(":")
    return Path(host), guest_path(Path(host), guest if sep else None)


class WasiHost:
    """Prepare a guest built with capsule's WASI runtime, run it, and serve its I/O."""

    def __init__(self, guest: Guest, config: WasiConfig) -> None:
        if not guest.has_export("capsule_io"):
            raise WasiError("the module was not built with capsule's WASI runtime (no capsule_io export)")
        self.guest = guest
        self.config = config
        self.stdout = config.stdout if config.stdout is not None else sys.stdout.buffer
        self.stderr = config.stderr if config.stderr is not None else sys.stderr.buffer
        self._stdin = config.stdin
        self._stdin_at = 0
        self.io = guest.call("capsule_io") & 0xFFFF_FFFF
        magic, version = struct.unpack("<II", guest.read(self.io, 8))
        if magic != IO_MAGIC or version != IO_VERSION:
            raise WasiError(f"the guest's control block is {magic:#x} v{version}, this host speaks "
                            f"{IO_MAGIC:#x} v{IO_VERSION}: rebuild the program")
        self.out_bytes = 0
        self.yields = 0

    # -- control block ----------------------------------------------------------------------------------
    def _u32(self, off: int) -> int:
        value: int = struct.unpack("<I", self.guest.read(self.io + off, 4))[0]
        return value

    def _set_u32(self, off: int, v: int) -> None:
        self.guest.write(self.io + off, struct.pack("<I", v & 0xFFFF_FFFF))

    def _alloc(self, data: bytes) -> int:
        addr = self.guest.call("capsule_alloc", len(data)) & 0xFFFF_FFFF
        if not addr:
            raise WasiError(f"the guest has no memory for {len(data)} bytes of input")
        if data:
            self.guest.write(addr, data)
        return addr

    # -- before the run -------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.config
        for count_off, buf_off, size_off, items in (
            (IO_ARGC, IO_ARGV_BUF, IO_ARGV_SIZE, cfg.args),
            (IO_ENVC, IO_ENV_BUF, IO_ENV_SIZE, cfg.env),
        ):
            blob = b"".join(s.encode() + b"\0" for s in items)
            self._set_u32(count_off, len(items))
            self._set_u32(buf_off, self._alloc(blob))
            self._set_u32(size_off, len(blob))
        tty = sum(1 << fd for fd, s in enumerate((cfg.stdin, self.stdout, self.stderr)) if _isatty(s))
        self._set_u32(IO_TTY, tty)
        self._set_u32(IO_FLAGS, FLUSH_EACH_WRITE if cfg.interactive else 0)
        if cfg.stdin is None:
            self._set_u32(IO_IN_EOF, 1)
        for host, gpath in cfg.dirs:
            self.add_dir(host, gpath)
        for host, gpath in cfg.files:
            self.add_file(gpath, _read(host))

    def add_file(self, path: str, data: bytes) -> None:
        p = path.encode()
        paddr = self._alloc(p)
        daddr = self._alloc(data)
        err = self.guest.call("capsule_fs_add", paddr, len(p), daddr, len(data))
        self.guest.call("capsule_free", paddr)
        if err:
            raise WasiError(f"cannot place {path} in the guest's file system (WASI errno {err})")

    def mkdir(self, path: str) -> None:
        p = path.encode()
        paddr = self._alloc(p)
        err = self.guest.call("capsule_fs_mkdir", paddr, len(p))
        self.guest.call("capsule_free", paddr)
        if err:
            raise WasiError(f"cannot make directory {path} in the guest's file system (WASI errno {err})")

    def add_dir(self, host: Path, path: str) -> None:
        if not host.is_dir():
            raise WasiError(f"--dir {host}: not a directory")
        self.mkdir(path)
        for root, dirs, files in os.walk(host):
            rel = Path(root).relative_to(host)
            base = path.rstrip("/") + ("" if rel == Path(".") else "/" + rel.as_posix())
            for d in sorted(dirs):
                self.mkdir(f"{base}/{d}")
            for f in sorted(files):
                self.add_file(f"{base}/{f}", _read(Path(root) / f))

    # -- while it runs ----------------------------------------------------------------------------------
    def service(self) -> None:
        """Do what the guest is waiting for (and always drain output)."""
        self.yields += 1
        self.drain()
        reason = self._u32(IO_REASON)
        if reason == Reason.INPUT:
            self._refill()
        elif reason == Reason.SLEEP:
            until = struct.unpack("<Q", self.guest.read(self.io + IO_SLEEP_UNTIL, 8))[0]
            delay = until - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)

    def drain(self) -> None:
        """Pass every output record to stdout/stderr, in the order the guest wrote them."""
        n = self._u32(IO_OUT_LEN)
        if not n:
            return
        data = self.guest.read(self._u32(IO_OUT_BUF), n)
        at = 0
        touched = set()
        while at + 8 <= n:
            fd, length = struct.unpack_from("<II", data, at)
            sink = self.stdout if fd == 1 else self.stderr
            sink.write(data[at + 8 : at + 8 + length])
            touched.add(id(sink))
            self.out_bytes += length
            at += 8 + ((length + 3) & ~3)
        self._set_u32(IO_OUT_LEN, 0)
        for sink in (self.stdout, self.stderr):
            if id(sink) in touched:
                sink.flush()

    def _refill(self) -> None:
        if self._u32(IO_IN_POS) < self._u32(IO_IN_LEN):
            return
        cap = self._u32(IO_IN_CAP)
        src = self._stdin
        if isinstance(src, bytes | bytearray):
            chunk = bytes(src[self._stdin_at : self._stdin_at + cap])
            self._stdin_at += len(chunk)
        elif src is None:
            chunk = b""
        else:
            reader = getattr(src, "read1", src.read)
            chunk = reader(cap)
        if chunk:
            self.guest.write(self._u32(IO_IN_BUF), chunk)
        self._set_u32(IO_IN_POS, 0)
        self._set_u32(IO_IN_LEN, len(chunk))
        if not chunk:
            self._set_u32(IO_IN_EOF, 1)

    # -- after it -------------------------------------------------------------------------------------------
    def files(self) -> list[tuple[str, int, bool, bytes]]:
        """Every node of the guest's file system: (path, filetype, changed during the run, contents)."""
        listing = self.guest.call("capsule_fs_list") & 0xFFFF_FFFF
        if not listing:
            raise WasiError("the guest has no memory left to list its files")
        count, entries = struct.unpack("<II", self.guest.read(listing, 8))
        raw = self.guest.read(entries, count * FS_ENTRY_SIZE) if count else b""
        out = []
        for i in range(count):
            path_addr, data, size, ftype, dirty = struct.unpack_from("<IIIBB", raw, i * FS_ENTRY_SIZE)
            out.append((self._cstr(path_addr), ftype, bool(dirty),
                        self.guest.read(data, size) if ftype == FILETYPE_REGULAR_FILE and size else b""))
        self.guest.call("capsule_fs_list_free")
        return out

    def _cstr(self, addr: int) -> str:
        buf = b""
        while b"\0" not in buf:
            buf += self.guest.read(addr + len(buf), 256)
        return buf[: buf.index(b"\0")].decode(errors="surrogateescape")

    def write_back(self, out_dir: Path) -> list[Path]:
        """Write what the guest created or changed under ``out_dir`` (guest path /a/b -> out_dir/a/b)."""
        root = out_dir.resolve()
        written = []
        for path, ftype, dirty, data in self.files():
            if not dirty:
                continue
            target = (root / path.lstrip("/")).resolve()
            if root not in target.parents:
                raise WasiError(f"guest path {path} leaves --out {out_dir}")
            if ftype == FILETYPE_DIRECTORY:
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                written.append(target)
        return written

    def run(self) -> int:
        """Set up, run ``_start`` to the end, drain the last output, write files back; the exit status."""
        self.setup()
        try:
            code = self.guest.run_start(self.service)
        finally:
            self.drain()
        if code is None:
            code = self._u32(IO_EXIT_CODE) if self._u32(IO_EXITED) else 0
        if self.config.out_dir is not None:
            self.write_back(self.config.out_dir)
        return code & 0xFF


def _isatty(stream: bytes | BinaryIO | None) -> bool:
    if stream is None or isinstance(stream, bytes):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise WasiError(f"cannot read {path}: {e.strerror}") from None


# -- the kernel engine (the reference engine and the choice between them: capsule.testing.engines) ----------
class KernelGuest:
    """The module compiled to BPF and run in the kernel by ``capsule.runtime.Instance``.

    ``Instance.start``/``resume`` hand back ``Pending`` at capsule.yield (``yielded``) and when the budget runs
    out, and raise ``GuestExit`` at capsule.exit.
    """

    def __init__(self, instance: Instance) -> None:
        self.inst = instance

    @classmethod
    def from_wasm(cls, wasm: Path, options: Options | None = None) -> KernelGuest:
        """Compile the module to BPF and load it."""
        from capsule.compiler import compile_module
        from capsule.runtime.instance import Instance
        from capsule.wasm import load

        return cls(Instance(compile_module(load(wasm.read_bytes()), options)))

    def close(self) -> None:
        self.inst.close()

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self.inst.mem[addr : addr + size])

    def write(self, addr: int, data: bytes) -> None:
        self.inst.mem[addr : addr + len(data)] = data

    def has_export(self, name: str) -> bool:
        return any(e.name == name for e in self.inst.meta.exports)

    def call(self, name: str, *args: int) -> int:
        res = self.inst.call(name, *args)
        return res[0] if res else 0

    def run_start(self, service: Callable[[], None]) -> int | None:
        from capsule.runtime.errors import GuestExit, Pending

        try:
            res = self.inst.start(self.inst.export_index("_start"), [])
            while isinstance(res, Pending):  # a capsule.yield, or a used-up budget: serve the guest, go on
                service()
                res = self.inst.resume(res.token)
        except GuestExit as e:
            return e.code
        return None
