"""Mutating inputs, reproducibly: every change is drawn from a ``random.Random`` the caller seeds, so an input is
named by (seed, target, index) and made again from those three alone.

``mutate`` changes bytes the way fuzzers that find parser bugs do (bit flips, interesting values, LEB128
continuation bytes, cut, copied or dropped chunks, truncation); ``mutate_json`` changes one value, key or element
of a JSON document, which reaches the checks behind the parser (``.capsule.meta``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x40, 0x20, 0x10)
INTERESTING_WORDS = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
INTERESTING_VALUES: tuple[Any, ...] = (0, 1, -1, 7, 255, 65536, 1 << 31, (1 << 32) - 1, 1 << 32, 1 << 63,
                                       (1 << 64) - 1, 1 << 64, -(1 << 63), 0.5, True, False, None, "", "x" * 300,
                                       "i32", [], {}, [0], [[65, 0]])
MAX_MUTATIONS = 4


def _flip(data: bytearray, rng: random.Random) -> None:
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _byte(data: bytearray, rng: random.Random) -> None:
    data[rng.randrange(len(data))] = rng.choice(INTERESTING_BYTES)


def _word(data: bytearray, rng: random.Random) -> None:
    at = rng.randrange(len(data))
    data[at : at + 4] = rng.choice(INTERESTING_WORDS).to_bytes(4, "little")[: len(data) - at]


def _leb(data: bytearray, rng: random.Random) -> None:
    """Make a byte a LEB128 continuation (an over-long or runaway integer in wasm)."""
    data[rng.randrange(len(data))] |= 0x80


def _drop(data: bytearray, rng: random.Random) -> None:
    at = rng.randrange(len(data))
    del data[at : at + rng.randint(1, 16)]


def _copy(data: bytearray, rng: random.Random) -> None:
    src = rng.randrange(len(data))
    chunk = data[src : src + rng.randint(1, 32)]
    at = rng.randrange(len(data) + 1)
    data[at:at] = chunk


def _truncate(data: bytearray, rng: random.Random) -> None:
    del data[rng.randrange(len(data)) :]


MUTATORS: tuple[Callable[[bytearray, random.Random], None], ...] = (_flip, _byte, _word, _leb, _drop, _copy,
                                                                     _truncate)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to MAX_MUTATIONS random changes (truncation less often than the rest)."""
    out = bytearray(data)
    for _ in range(min(MAX_MUTATIONS, 1 + int(rng.expovariate(1.5)))):  # mostly one: more inputs stay valid
        if not out:
            break
        op = rng.choice(MUTATORS)
        if op is _truncate and rng.random() < 0.7:
            op = _flip
        op(out, rng)
    return bytes(out)


def _slots(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document: the paths of its values, containers included."""
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _slots(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _slots(v, (*path, i))
    return out


def mutate_json(raw: bytes, rng: random.Random) -> bytes:
    """One to three structural changes of a JSON document (a value replaced, a key or element dropped or
    doubled); bytes that are not JSON get ``mutate``."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return mutate(raw, rng)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_slots(doc)[1:] or [()])
        if not path:
            doc = rng.choice(INTERESTING_VALUES)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        choice = rng.random()
        if choice < 0.6:
            parent[key] = rng.choice(INTERESTING_VALUES)
        elif choice < 0.8:
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, parent[key])
        elif isinstance(parent[key], int) and not isinstance(parent[key], bool):
            parent[key] += rng.choice((-1, 1, 1 << 16))
    return json.dumps(doc).encode()
