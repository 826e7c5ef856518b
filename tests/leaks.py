"""What a test session leaves behind outside its own process: BPF objects, pins, network namespaces, processes.

The session-level check in ``tests/conftest.py`` is built on these. The kernel is shared with whatever else runs
on the machine (other test sessions among them), so nothing here counts objects: it compares object *ids* before
and after, and attributes each new one that is still alive to its holders.

* Every process the session starts inherits ``CAPSULE_TEST_SESSION=<token>`` in its environment (the token is the
  controlling pytest's pid), so a process of ours is found by ``/proc/PID/environ`` even after its parent died and
  it was re-parented.
* A BPF object stays alive while a file descriptor, a pin in bpffs or an attachment refers to it. The holders of
  descriptors are read from ``/proc/PID/fdinfo`` (``prog_id``/``map_id``/``link_id``); an object reached from a
  holder (a program's maps, a link's program, the programs and maps in a program array or map of maps) belongs
  to that holder. An object is *ours* when a process of ours holds it, or a pin of ours (a path with the token,
  ``pin_path``) does, or nothing does: a new object that no descriptor and no pin keeps alive survives only by
  an attachment, and the suite attaches only in namespaces it creates. Cgroup programs are left out of that last
  rule: systemd attaches those for its units, and the suite never does.
* Pins and namespaces that tests make carry the token in their names (``pin_path``, ``netns_name``), so a leftover
  one is found by name without mistaking another session's for ours.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

SESSION_ENV = "CAPSULE_TEST_SESSION"
BPFFS = Path("/sys/fs/bpf")
NETNS_DIR = Path("/run/netns")
BPFTOOL = "bpftool"
# how long exiting workers and their descriptors get to go away before a leak is reported
SETTLE_SECONDS = float(os.environ.get("CAPSULE_LEAK_SETTLE", "10"))
_FDINFO_KEYS = {"anon_inode:bpf-prog": ("prog", "prog_id:"), "anon_inode:bpf-map": ("map", "map_id:"),
                "anon_inode:bpf_link": ("link", "link_id:")}
_CONTAINERS = ("prog_array", "array_of_maps", "hash_of_maps")

ObjKey = tuple[str, int]  # ("prog" | "map" | "link", id)


def token() -> str:
    """The session's token: set by the controlling pytest process and inherited by everything it starts."""
    return os.environ.get(SESSION_ENV) or str(os.getpid())


def _marked(name: str, tok: str) -> bool:
    """Whether a pin's or namespace's name carries the token (``pin_path``, ``netns_name``)."""
    return f"-{tok}-" in name


def pin_path(tag: str) -> Path:
    """A bpffs path for a test's pins that the session check recognises as this session's."""
    return BPFFS / f"capsule-test-{token()}-{tag}"


def netns_name(tag: str) -> str:
    """A network namespace name that the session check recognises as this session's."""
    return f"capsule-{token()}-{tag}"


# -- the process table ---------------------------------------------------------------------------------------
def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def session_pids(tok: str) -> set[int]:
    """Live processes started by the session with token ``tok`` (the controller itself included)."""
    entry = f"{SESSION_ENV}={tok}".encode()
    return {pid for pid in _pids() if _environ_has(pid, entry)}


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])  # the command name may hold spaces and parentheses


def descendants(root: int) -> set[int]:
    """Live processes below ``root`` in the process tree."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = _ppid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def describe_pid(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return f"pid {pid}: {cmd[:160]}"


def holders() -> dict[ObjKey, set[int]]:
    """Which processes hold a descriptor of which BPF object."""
    out: dict[ObjKey, set[int]] = {}
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                kind, key = _FDINFO_KEYS[os.readlink(f"/proc/{pid}/fd/{fd}")]
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
            except (OSError, KeyError):
                continue
            for line in info.splitlines():
                if line.startswith(key):
                    out.setdefault((kind, int(line.split()[1])), set()).add(pid)
    return out


# -- the kernel's objects ------------------------------------------------------------------------------------
def _bpftool(*args: str, attempts: int = 10) -> list[dict[str, object]]:
    """bpftool's JSON. A listing races with objects going away elsewhere on the machine (bpftool then fails with
    EAGAIN or ENOENT for one id), so a failed listing is tried again."""
    for _ in range(attempts):
        res = subprocess.run([BPFTOOL, "-j", *args], capture_output=True, text=True, timeout=60)
        if res.returncode == 0:
            data = json.loads(res.stdout or "[]")
            return data if isinstance(data, list) else []
        time.sleep(0.1)
    raise OSError(f"bpftool {' '.join(args)}: {res.stderr.strip() or res.stdout.strip()}")


def bpf_objects(*, pinned: bool = False) -> dict[ObjKey, dict[str, object]]:
    """Every program, map and link the kernel has now, by (kind, id); ``pinned`` adds their bpffs paths."""
    flags = ("-f",) if pinned else ()
    out: dict[ObjKey, dict[str, object]] = {}
    for kind in ("prog", "map", "link"):
        for rec in _bpftool(*flags, kind, "show"):
            out[(kind, int(str(rec["id"])))] = rec
    return out


def _contents(map_id: int) -> list[int]:
    """The ids a program array or map of maps holds (the kernel answers a lookup from user space with ids)."""
    try:
        entries = _bpftool("map", "dump", "id", str(map_id))
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    ids = []
    for e in entries:
        value = e.get("value")
        if isinstance(value, list) and value:  # raw bytes as hex strings: a little-endian u32 id
            ids.append(int.from_bytes(bytes(int(str(b), 16) for b in value[:4]), "little"))
        elif isinstance(value, int):
            ids.append(value)
    return ids


def _edges(key: ObjKey, rec: dict[str, object]) -> list[ObjKey]:
    kind, ident = key
    if kind == "prog":
        ids = rec.get("map_ids")
        return [("map", int(str(m))) for m in ids] if isinstance(ids, list) else []
    if kind == "link" and "prog_id" in rec:
        return [("prog", int(str(rec["prog_id"])))]
    if kind == "map" and rec.get("type") in _CONTAINERS:
        inner = "prog" if rec.get("type") == "prog_array" else "map"
        return [(inner, i) for i in _contents(ident)]
    return []


def _reach(roots: Iterable[ObjKey], objects: dict[ObjKey, dict[str, object]]) -> set[ObjKey]:
    seen: set[ObjKey] = set()
    todo = [r for r in roots if r in objects]
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        todo.extend(k for k in _edges(key, objects[key]) if k in objects and k not in seen)
    return seen


def _pins(rec: dict[str, object]) -> list[str]:
    pins = rec.get("pinned")
    return [str(p) for p in pins] if isinstance(pins, list) else []


def describe_object(key: ObjKey, rec: dict[str, object]) -> str:
    kind, ident = key
    what = rec.get("type", "")
    name = rec.get("name", "")
    pins = _pins(rec)
    return f"{kind} {ident} ({what} {name!s}{', pinned at ' + ', '.join(map(str, pins)) if pins else ''})"


@dataclass
class KernelBaseline:
    """What was there when the session started."""

    ids: set[ObjKey] = field(default_factory=set)

    @classmethod
    def take(cls) -> KernelBaseline:
        return cls(set(bpf_objects()))


def leaked_objects(baseline: KernelBaseline, tok: str, ours: set[int]) -> list[str]:
    """New objects that are ours (see the module's docstring), described one a line."""
    objects = bpf_objects(pinned=True)
    new = {k: v for k, v in objects.items() if k not in baseline.ids}
    if not new:
        return []
    held = holders()
    by_others = [k for k, pids in held.items() if pids - ours]
    by_us = [k for k, pids in held.items() if pids & ours]
    pinned_by_us = [k for k, v in objects.items() if any(_marked(str(p), tok) for p in _pins(v))]
    pinned_elsewhere = [k for k, v in objects.items() if k not in pinned_by_us and _pins(v)]
    cgroup = [k for k, v in objects.items() if str(v.get("type", "")).startswith("cgroup")]
    mine = _reach(by_us + pinned_by_us, objects)
    foreign = _reach(by_others + pinned_elsewhere + cgroup, objects)
    out = []
    for key, rec in sorted(new.items()):
        if key in mine:
            pids = sorted(held.get(key, set()) & ours)
            why = f"held by {', '.join(describe_pid(p) for p in pids)}" if pids else "kept by a pin or object of ours"
        elif key in foreign:
            continue
        else:
            why = "held by no process and pinned nowhere (left attached, or inside a leaked object)"
        out.append(f"{describe_object(key, rec)}: {why}")
    return out


def leftover_pins(tok: str) -> list[str]:
    if not BPFFS.is_dir():
        return []
    found = []
    for root, dirs, files in os.walk(BPFFS):
        for name in dirs + files:
            if _marked(name, tok):
                found.append(f"pin {Path(root) / name}")
        dirs[:] = [d for d in dirs if not _marked(d, tok)]
    return found


def leftover_netns(tok: str) -> list[str]:
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    return [f"network namespace {n}" for n in sorted(names) if _marked(n, tok)]


def settle(check: Callable[[], list[str]], seconds: float = SETTLE_SECONDS) -> list[str]:
    """Run ``check`` until it finds nothing or ``seconds`` pass (exiting processes release what they hold)."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.25)
