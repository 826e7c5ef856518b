"""DOOM: doomgeneric (from the ``cydoomgeneric`` sdist) with capsule's headless platform layer and Freedoom's
``freedoom1.wad`` (Debian's ``freedoom``), built from the same sources natively and for capsule.

Both builds play the same scripted input (``capsule.demo.doom.DEMO_INPUT``: the title screen, the menu, the
melt into E1M1, a walk with turns, a shot, a strafe and the use key) for 100 frames. The native build dumps
every frame (``-capsule-dump``); the guest hands each frame to the host at its ``capsule.yield``, one game
tick and its frame per invocation; the SHA-256 of every frame must be equal, and so must DOOM's start-up
log, but for the one line where it prints the address of its zone memory.
"""

from __future__ import annotations

import hashlib
import io
import re
import time
from pathlib import Path

import pytest

from capsule.demo import doom as demo
from capsule.runtime.wasi_host import WasiError
from capsule.sources import doom, fetch
from tests.thirdparty.conftest import kernel_param
from tests.thirdparty.runs import native

FRAMES = 100
FRAME_BYTES = 320 * 200 * 4
ENGINES = ["wasmtime", kernel_param()]
ADDRESS = re.compile(rb"zone memory: 0x[0-9a-f]+,")


@pytest.fixture(scope="module")
def game() -> tuple[Path, Path, Path, Path]:
    """(tree, WAD, native doom, guest module)."""
    try:
        tree, wad = doom.fetch(), doom.wad()
    except fetch.RegistryUnavailable as e:
        pytest.skip(f"doomgeneric or Freedoom is not cached and its registry cannot be reached: {e}")
    return tree, wad, doom.build_native(tree), doom.build_wasm(tree)


def native_frames(exe: Path, wad: Path, tmp: Path) -> tuple[list[str], bytes]:
    """The native build's frame hashes and start-up log, on the demo's input."""
    files = {demo.WAD_GUEST: wad.read_bytes(), demo.INPUT_GUEST: demo.DEMO_INPUT.encode()}
    cwd = tmp / "native"
    argv = ["doom", "-iwad", demo.WAD_GUEST, "-capsule-input", demo.INPUT_GUEST, "-capsule-frames", str(FRAMES),
            "-capsule-dump", "frames.bin"]
    run = native(exe, argv, cwd=cwd, env={"HOME": str(cwd)}, files=files)
    assert run.code == 0 and run.stderr == b"", run.stderr
    dump = run.files["frames.bin"]
    assert len(dump) == FRAMES * FRAME_BYTES
    return [hashlib.sha256(dump[i * FRAME_BYTES:(i + 1) * FRAME_BYTES]).hexdigest() for i in range(FRAMES)], run.stdout


def test_fetched_tree_and_wad(game: tuple[Path, Path, Path, Path]) -> None:
    tree, wad, _, _ = game
    assert (tree / fetch.STAMP).read_text().strip() == doom.SDIST_SHA256
    assert all((tree / f"{name}.c").is_file() for name in doom.ENGINE)
    assert wad.name == "freedoom1.wad" and wad.read_bytes()[:4] == b"IWAD"
    t0 = time.perf_counter()
    assert doom.fetch() == tree and doom.wad() == wad  # cache hits
    assert time.perf_counter() - t0 < 1


def test_native_reference_plays(game: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    """The reference itself: DOOM starts, and the frames change as the input script plays."""
    hashes, log = native_frames(game[2], game[1], tmp_path)
    assert b"Freedoom: Phase 1" in log and b"I_InitGraphics: DOOM screen size: w x h: 320 x 200" in log
    assert len(set(hashes)) > 50  # the menu, the melt and the walk: most frames differ
    assert hashes[0] == hashes[1]  # the title screen holds before the first key


@pytest.mark.parametrize("engine", ENGINES)
def test_frames_match_native(engine: str, game: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    _, wad, exe, wasm = game
    want, native_log = native_frames(exe, wad, tmp_path)
    log = io.BytesIO()
    run = demo.play(wasm, wad, engine=engine, frames=FRAMES, stdout=log, stderr=log)
    print(f"\nDOOM on {engine}: {FRAMES} frames in {run.seconds:.2f} s"
          + (f", {sum(run.invocations)} kernel runs" if run.invocations else ""))
    assert run.status == 0
    assert run.frame_hashes == want
    assert ADDRESS.sub(b"zone memory: <address>,", log.getvalue()) == ADDRESS.sub(b"zone memory: <address>,",
                                                                                native_log)
    if engine == "kernel":  # after the first frame (start-up, its log flushed on the way), a tick and its frame per run
        assert len(run.invocations) == FRAMES and run.invocations[1:] == [1] * (FRAMES - 1)


def test_png_and_terminal_views(tmp_path: Path) -> None:
    """What the demo shows: a frame as a PNG (header, size, pixels) and as 24-bit terminal text."""
    pixels = bytes([0, 0, 255, 0]) * 4 + bytes([255, 0, 0, 0]) * 4  # 4x2: a red row over a blue one
    data = demo.png(4, 2, pixels)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert int.from_bytes(data[16:20], "big") == 4 and int.from_bytes(data[20:24], "big") == 2
    import zlib

    idat = data.index(b"IDAT")
    raw = zlib.decompress(data[idat + 4:idat + 4 + int.from_bytes(data[idat - 4:idat], "big")])
    assert raw == b"\0" + b"\xff\0\0" * 4 + b"\0" + b"\0\0\xff" * 4
    text = demo.terminal(4, 2, pixels, columns=2)
    assert text.count("\u2580") == 2 and "38;2;255;0;0m" in text and "48;2;0;0;255m" in text


def test_not_doom_is_refused(tmp_path: Path) -> None:
    from capsule.toolchain.guest import build_wasm

    src = tmp_path / "hello.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n')
    with pytest.raises(WasiError, match="not capsule's headless DOOM"):
        demo.play(build_wasm([src]).wasm, src, engine="wasmtime", frames=1)
