"""Boot a Debian kernel under qemu and run a command in it on the host's own file system.

The guest sees the host's ``/`` read-only over virtio-9p with a tmpfs overlay on top (it writes freely and
nothing reaches the host), plus one writable share, ``out``, at the same path as on the host, for results.
A small busybox-static initramfs loads the modules that mounting needs, mounts proc, sys, devtmpfs, bpffs and
tracefs, puts the kernel's modules and config where the host's tools look for them, switches root and runs
the command, prints ``STATUS_MARKER`` and the exit status on the serial console, and powers off. The
command sees the same paths as the host (the worktree, its ``.venv``, the caches).

A VM's life is its caller's: ``VM.run`` kills qemu by pid when the time is up or on any exception (Ctrl-C
included), and qemu is started with PR_SET_PDEATHSIG so that it dies with the process that started it even
when that process is killed outright (a qemu whose parent died keeps running at full CPU otherwise).

TCG only (no KVM on these machines): ``-accel tcg,thread=multi -cpu max``. ``capsule.testing.vm`` is the
test run on top of this (``python -m capsule.testing.vm``).
"""

from __future__ import annotations

import ctypes
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from capsule.sources.kernels import BootableKernel, boot_modules

QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static puts a static binary here
STATUS_MARKER = "CAPSULE-VM-STATUS"  # the init's last line: "CAPSULE-VM-STATUS <exit status>"
READY_MARKER = "CAPSULE-VM-READY"  # printed right before the command starts: the boot is over
HOST_TAG, OUT_TAG = "hostroot", "vmout"
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PR_SET_PDEATHSIG = 1
_STATUS = re.compile(rf"^{STATUS_MARKER} (\d+)\s*$", re.M)


class VMError(RuntimeError):
    """qemu could not start, or the guest ended without reporting the command's exit status."""


class VMTimeout(VMError, TimeoutError):
    """The VM ran past its time and was killed; ``console`` is what it printed until then."""

    def __init__(self, message: str, console: str) -> None:
        super().__init__(message)
        self.console = console


def missing_tools() -> list[str]:
    """What booting needs and this machine lacks, as Debian package names (``scripts/setup-kernels.sh``)."""
    need = {"qemu-system-x86": shutil.which(QEMU), "busybox-static": BUSYBOX.is_file() or None,
            "kmod": shutil.which("depmod") or shutil.which("/usr/sbin/depmod"), "zstd": shutil.which("zstd")}
    return [pkg for pkg, found in need.items() if not found]


# -- the initramfs -------------------------------------------------------------------------------------------
def cpio(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """A cpio archive in the "newc" format the kernel unpacks: (path, mode, contents) entries; a directory's
    mode has S_IFDIR and no contents. Several archives concatenated make one initramfs."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        raw = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + raw
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


_DIR, _FILE, _EXEC = 0o040755, 0o100644, 0o100755

INIT = r"""#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /sys /dev /lower /rw /newroot
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for m in $($B cat /modules.order); do $B insmod /modules/$m || echo "capsule-vm: insmod $m failed"; done
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 {host_tag} /lower || echo "capsule-vm: no 9p root"
$B mount -t tmpfs -o size=75% tmpfs /rw
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot
$B mount -t proc proc /newroot/proc
$B mount -t sysfs sysfs /newroot/sys
$B mount -t devtmpfs devtmpfs /newroot/dev
$B mount -t bpf bpf /newroot/sys/fs/bpf
$B mount -t tracefs tracefs /newroot/sys/kernel/tracing 2>/dev/null
$B mount -t tmpfs tmpfs /newroot/tmp
$B mount -t tmpfs tmpfs /newroot/run
$B mkdir -p /newroot/lib/modules/{release} /newroot{out} /newroot/run/capsule-vm
$B mount --bind /newroot{modules} /newroot/lib/modules/{release}
$B cp /newroot{boot}/config-{release} /newroot{boot}/System.map-{release} /newroot/boot/ 2>/dev/null
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 {out_tag} /newroot{out}
$B cp /bin/busybox /command /run.sh /newroot/run/capsule-vm/
exec $B switch_root /newroot /run/capsule-vm/busybox sh /run/capsule-vm/run.sh
"""
# PID 1 after switch_root: the host's / is now the root of everything (so the kernel's own helpers, such as
# modprobe for a module a test needs, find the host's tools and this kernel's modules)
RUN = r"""B=/run/capsule-vm/busybox
echo {ready}
/bin/sh /run/capsule-vm/command
echo "{status} $?"
$B sync
$B poweroff -f
"""


def initramfs(kernel: BootableKernel, command: str, out: Path, env: dict[str, str]) -> bytes:
    """busybox, the modules for the root file system, ``/init`` and the command (a shell script run in the
    host's root by the host's ``/bin/sh``)."""
    modules = boot_modules(kernel)
    entries: list[tuple[str, int, bytes]] = [("bin", _DIR, b""), ("modules", _DIR, b"")]
    entries.append(("bin/busybox", _EXEC, BUSYBOX.read_bytes()))
    entries += [(f"modules/{m.name}", _FILE, m.read_bytes()) for m in modules]
    entries.append(("modules.order", _FILE, "".join(f"{m.name}\n" for m in modules).encode()))
    init = INIT.format(host_tag=HOST_TAG, out_tag=OUT_TAG, release=kernel.release, modules=kernel.modules_dir,
                       boot=kernel.tree / "boot", out=out)
    entries.append(("init", _EXEC, init.encode()))
    entries.append(("run.sh", _FILE, RUN.format(ready=READY_MARKER, status=STATUS_MARKER).encode()))
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    entries.append(("command", _FILE, f"{exports}{command}\n".encode()))
    return cpio(entries)


# -- qemu ----------------------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """In the child, before exec: the kernel kills it (SIGKILL) when the thread that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class VMResult:
    """What a VM run gave: the command's exit status, the serial console, and how long boot and command took."""

    kernel: str
    release: str
    status: int
    console: str
    boot_seconds: float
    run_seconds: float


@dataclass
class VM:
    """One boot of ``kernel`` running ``command`` (a shell script) in ``cwd``; ``out`` is shared writable.

    ``echo`` receives each console line as it arrives (progress for people); ``env`` is exported to the
    command. ``pid`` is qemu's while it runs.
    """

    kernel: BootableKernel
    command: str
    out: Path
    cwd: Path = field(default_factory=Path.cwd)
    env: dict[str, str] = field(default_factory=dict)
    memory: str = "3G"  # the map window allocates its pieces whole (133 MiB an instance by default)
    cpus: int = 2
    echo: Callable[[str], None] | None = None
    pid: int | None = None

    def qemu_argv(self, initrd: Path) -> list[str]:
        append = "console=ttyS0 loglevel=3 panic=-1 cryptomgr.notests rdinit=/init"
        return [
            QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", str(self.cpus), "-m", self.memory,
            "-kernel", str(self.kernel.vmlinux), "-initrd", str(initrd), "-append", append,
            "-serial", "stdio",
            "-virtfs", f"local,path=/,mount_tag={HOST_TAG},security_model=none,readonly=on,multidevs=remap",
            "-virtfs", f"local,path={self.out},mount_tag={OUT_TAG},security_model=none,multidevs=remap",
        ]

    def run(self, timeout: float) -> VMResult:
        """Boot, run the command, power off; ``VMTimeout`` after ``timeout`` seconds (qemu killed)."""
        self.out.mkdir(parents=True, exist_ok=True)
        env = {"PATH": GUEST_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "TERM": "dumb",
               "CAPSULE_VM": self.kernel.label, "CAPSULE_VM_OUT": str(self.out), **self.env}
        script = f"cd {shlex.quote(str(self.cwd))} || exit 125\n{self.command}"
        initrd = self.out / ".initrd.cpio"
        initrd.write_bytes(initramfs(self.kernel, script, self.out, env))
        return self.boot(self.qemu_argv(initrd), timeout)

    def boot(self, argv: list[str], timeout: float) -> VMResult:
        """Run qemu as ``argv`` until it exits (``VMTimeout`` after ``timeout`` s); the command's status."""
        name = f"the {self.kernel.label} VM"

        def started(pid: int | None) -> None:
            self.pid = pid

        start = time.monotonic()
        console, ready, code = run_qemu(argv, timeout, name=name, echo=self.echo, started=started)
        end = time.monotonic()
        m = _STATUS.search(console)
        if m is None:
            tail = "\n".join(console.strip().splitlines()[-15:])
            raise VMError(f"{name} stopped (qemu status {code}) without reporting the command's status; "
                          f"console tail:\n{tail}")
        boot = (ready or end) - start
        return VMResult(self.kernel.label, self.kernel.release, int(m.group(1)), console, boot, end - (ready or end))


def run_qemu(argv: list[str], timeout: float, *, name: str = "qemu", echo: Callable[[str], None] | None = None,
             started: Callable[[int | None], None] | None = None) -> tuple[str, float | None, int]:
    """Run qemu and read its console until it exits: (console, time ``READY_MARKER`` was seen, exit status).

    qemu is killed by pid when ``timeout`` seconds are up (``VMTimeout``) and on any exception, Ctrl-C
    included; ``started`` hears its pid, then None once it is gone.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
    except OSError as e:
        raise VMError(f"cannot start {argv[0]}: {e.strerror} (install qemu-system-x86: "
                      "scripts/setup-kernels.sh)") from None
    if started is not None:
        started(proc.pid)
    text, ready = bytearray(), None
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            pending = b""
            while True:
                left = start + timeout - time.monotonic()
                if left <= 0:
                    raise VMTimeout(f"{name} ran past {timeout:.0f} s and was killed", text.decode(errors="replace"))
                if not sel.select(min(left, 1.0)):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                text += chunk
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip("\r")
                    if ready is None and line.strip() == READY_MARKER:
                        ready = time.monotonic()
                    if echo is not None:
                        echo(line)
        proc.wait(timeout=max(1.0, start + timeout - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if started is not None:
            started(None)
    return text.decode(errors="replace").replace("\r\n", "\n"), ready, proc.returncode
