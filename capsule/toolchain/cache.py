"""Where capsule caches what it builds or fetches: one directory per kind, outside the repository.

``$CAPSULE_CACHE/<kind>`` when ``$CAPSULE_CACHE`` is set, else ``$XDG_CACHE_HOME/capsule/<kind>`` when
``$XDG_CACHE_HOME`` is set and not empty (the XDG base directory rule: an empty value counts as unset), else
``~/.cache/capsule/<kind>``. Every cache user calls ``cache_dir`` so that one variable moves them all.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """The cache directory for ``kind`` ("build", "src", "softfloat", ...); not created here."""
    own = os.environ.get("CAPSULE_CACHE")
    if own:
        return Path(own) / kind
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capsule" / kind
