"""Writing a file whole: what every layer that writes a file the user asked for shares (an object from
``capsule build`` or ``capsule opt``, a guest's file under ``--out``)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_TMP_IDS = itertools.count()


def write_whole(target: str | Path, data: bytes) -> None:
    """Write ``data`` to ``target`` under a temporary name in the same folder, then rename it into place: a
    reader never sees half of it, and a process killed midway leaves ``target`` as it was (and, after SIGKILL,
    a ``.capsule-*.tmp`` file beside it). A failed or interrupted write removes the temporary file."""
    target = Path(target)
    tmp = target.parent / f".capsule-{os.getpid()}-{next(_TMP_IDS)}.tmp"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
