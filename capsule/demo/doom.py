"""``capsule demo doom``: DOOM (doomgeneric with capsule's headless platform, Freedoom's WAD) on an engine, one
game tick and its frame per invocation, shown in the terminal or written as PNG files.

The guest is ``capsule.sources.doom``'s build (the command line fetches and builds it; this module gets the
module and the WAD, so it needs no registry). Its platform layer (``capsule/guest/programs/doom_headless.c``)
ends every frame with ``capsule.yield``: the host's service (``DoomHost``) finds the frame through the
exported ``capsule_doom`` block, hands the pixels to ``on_frame``, and resumes the guest for the next tic.
In the kernel each of those stretches is one run of the BPF program unless the budget cuts it, and the
demo reports how many runs each frame took.
"""

from __future__ import annotations

import hashlib
import io
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from capsule.compiler import Options
from capsule.runtime.wasi_host import Guest, KernelGuest, WasiConfig, WasiError, WasiHost
from capsule.testing.engines import open_guest

# struct capsule_doom (doom_headless.c)
DOOM_MAGIC, DOOM_VERSION = 0x4D4F4F44, 1
DOOM_SIZE = 28
DOOM_FIELDS = "<7I"  # magic, version, width, height, pixels, frame, now_ms
WAD_GUEST = "freedoom1.wad"  # in the guest's root, its working directory (relative, as a native run names it)
INPUT_GUEST = "input.txt"
#: the title screen, the menu (New Game, Episode 1, the default skill), the melt into E1M1, then a walk through
#: its first room: forward, a turn while walking, a shot, a strafe, the use key, a turn. (Starting with -warp
#: instead would melt from a screen nobody drew: whatever the allocator left there, which differs by platform.)
DEMO_INPUT = """\
3 +escape
4 -escape
8 +enter
9 -enter
12 +enter
13 -enter
16 +enter
17 -enter
40 +up
70 +left
82 -left
90 +fire
93 -fire
100 -up
102 +strafe_right
115 -strafe_right
118 +use
120 -use
125 +right
135 -right
"""
DEMO_FRAMES = 140

FrameSink = Callable[[int, int, int, bytes], None]  # (frame number, width, height, XRGB8888 pixels)


@dataclass
class DoomRun:
    """What a run produced: its exit status, the SHA-256 of every frame in order, the kernel runs each frame
    took (empty under wasmtime), and the wall time of the frames."""

    status: int
    frame_hashes: list[str] = field(default_factory=list)
    invocations: list[int] = field(default_factory=list)
    seconds: float = 0.0


class DoomHost(WasiHost):
    """A WasiHost that, whenever the guest yields with a new frame drawn, passes the frame on."""

    def __init__(self, guest: Guest, config: WasiConfig, on_frame: FrameSink) -> None:
        super().__init__(guest, config)
        if not guest.has_export("capsule_doom"):
            raise WasiError("the module is not capsule's headless DOOM (no capsule_doom export)")
        self.block = guest.call("capsule_doom") & 0xFFFF_FFFF
        magic, version, *_ = struct.unpack(DOOM_FIELDS, guest.read(self.block, DOOM_SIZE))
        if (magic, version) != (DOOM_MAGIC, DOOM_VERSION):
            raise WasiError(f"the guest's DOOM block is {magic:#x} v{version}, this host reads "
                            f"{DOOM_MAGIC:#x} v{DOOM_VERSION}: rebuild it")
        self.on_frame = on_frame
        self.frame = 0

    def service(self) -> None:
        super().service()
        _, _, width, height, pixels, frame, _ = struct.unpack(DOOM_FIELDS, self.guest.read(self.block, DOOM_SIZE))
        if frame != self.frame:
            self.frame = frame
            self.on_frame(frame, width, height, self.guest.read(pixels, width * height * 4))


def play(wasm: Path, wad: Path, *, engine: str = "kernel", frames: int = DEMO_FRAMES, script: str = DEMO_INPUT,
         on_frame: FrameSink | None = None, stdout: BinaryIO | None = None, stderr: BinaryIO | None = None,
         extra_args: tuple[str, ...] = (), options: Options | None = None) -> DoomRun:
    """Run ``frames`` frames of DOOM on ``engine`` with the key events of ``script`` (``doom_headless.c``'s
    format); every frame goes to ``on_frame`` and is hashed. ``options``: the kernel build's (a profile's)."""
    run = DoomRun(0)
    guest = open_guest(wasm, engine, options)
    inst = guest.inst if isinstance(guest, KernelGuest) else None
    last = [inst.stats.invocations if inst else 0]

    def frame(n: int, width: int, height: int, pixels: bytes) -> None:
        run.frame_hashes.append(hashlib.sha256(pixels).hexdigest())
        if inst is not None:
            run.invocations.append(inst.stats.invocations - last[0])
            last[0] = inst.stats.invocations
        if on_frame is not None:
            on_frame(n, width, height, pixels)

    with tempfile.TemporaryDirectory(prefix="capsule-doom-") as tmp:
        script_file = Path(tmp) / "input.txt"
        script_file.write_text(script)
        args = ["doom", "-iwad", WAD_GUEST, *extra_args, "-capsule-input", INPUT_GUEST, "-capsule-frames",
                str(frames)]
        config = WasiConfig(args=args, env=["HOME=/"], files=[(wad, "/" + WAD_GUEST), (script_file, "/" + INPUT_GUEST)],
                            stdout=stdout, stderr=stderr)
        try:
            t0 = time.perf_counter()
            run.status = DoomHost(guest, config, frame).run()
            run.seconds = time.perf_counter() - t0
        finally:
            guest.close()
    return run


# -- showing frames ----------------------------------------------------------------------------------------
def rgb(pixels: bytes) -> bytearray:
    """XRGB8888 words (little-endian: B, G, R, X bytes) as packed RGB bytes."""
    out = bytearray(len(pixels) // 4 * 3)
    out[0::3], out[1::3], out[2::3] = pixels[2::4], pixels[1::4], pixels[0::4]
    return out


def png(width: int, height: int, pixels: bytes) -> bytes:
    """A frame as an 8-bit RGB PNG file."""
    data = rgb(pixels)
    stride = width * 3
    raw = b"".join(b"\0" + data[y * stride:(y + 1) * stride] for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def terminal(width: int, height: int, pixels: bytes, columns: int = 80) -> str:
    """A frame as 24-bit-colour terminal text: one character per cell of ``columns`` across, the upper and the
    lower half of each cell coloured separately (the upper half block), nearest pixel."""
    data = rgb(pixels)
    rows = max(1, round(height * columns / width / 2))
    lines = []
    for r in range(rows):
        cells = []
        for c in range(columns):
            x = c * width // columns
            top = (r * 2 * height // (rows * 2)) * width + x
            bottom = ((r * 2 + 1) * height // (rows * 2)) * width + x
            t, b = data[top * 3:top * 3 + 3], data[bottom * 3:bottom * 3 + 3]
            cells.append(f"\x1b[38;2;{t[0]};{t[1]};{t[2]}m\x1b[48;2;{b[0]};{b[1]};{b[2]}m\u2580")
        lines.append("".join(cells) + "\x1b[0m")
    return "\n".join(lines)


def run_demo(wasm: Path, wad: Path, *, engine: str, frames: int, png_dir: Path | None, show: bool,
             out: BinaryIO | None = None) -> int:
    """``capsule demo doom``: play, write PNGs and/or animate the terminal, then a summary line."""
    write = sys.stdout.write

    def on_frame(n: int, width: int, height: int, pixels: bytes) -> None:
        if png_dir is not None:
            (png_dir / f"frame-{n:04d}.png").write_bytes(png(width, height, pixels))
        if show:
            write("\x1b[H" + terminal(width, height, pixels) + f"\nframe {n}/{frames}\n")
            sys.stdout.flush()

    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
    if show:
        write("\x1b[2J")
    log: BinaryIO = out if out is not None else io.BytesIO()
    run = play(wasm, wad, engine=engine, frames=frames, on_frame=on_frame, stdout=log, stderr=log)
    per = f", {sum(run.invocations) / len(run.invocations):.2f} kernel runs per frame" if run.invocations else ""
    where = f", PNGs in {png_dir}" if png_dir is not None else ""
    print(f"DOOM on {engine}: {len(run.frame_hashes)} frames in {run.seconds:.2f} s "
          f"({len(run.frame_hashes) / max(run.seconds, 1e-9):.1f} frames/s){per}{where}; exit status {run.status}")
    return run.status

