"""Why is each program of the ``capsule bench opt`` corpus loadable or not? A tally of the reasons.

Usage::

    .venv/bin/python scripts/load_tally.py OUT.jsonl [--limit N] [--suite S] [--proposed]
    .venv/bin/python scripts/load_tally.py --compare BEFORE.jsonl AFTER.jsonl

Every built object of the corpus (at most ``--limit`` per suite, in the benchmark's order) is read as the
benchmark reads it (``read_object``, then ``as_loaded``), its maps are created once and each program is loaded
(no log unless refused, no test runs), which is what makes a program "loadable" in ``capsule bench opt``. One
JSON line per program (or per unreadable object) goes to OUT.jsonl; the reasons, normalised (numbers and names
blanked), are tallied on stdout. Selftests programs marked ``__failure`` (BTF decl tag
``comment:test_expect_failure``) that the kernel refuses are counted as expected failures.

``--proposed`` shows what the benchmark would see if it left storage maps at ``max_entries`` 0 (the kernel
requires it; ``as_loaded`` gives them the CPU count) and typed Suricata's own sections (``filter``,
``loadbalancer``: socket filters). ``--compare`` prints both runs side by side by broad category, over the
suites of the first.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

from capsule.bench.opt import as_loaded
from capsule.bench.opt_corpus import load_manifest
from capsule.bpf.btf_types import DeclTag, Func
from capsule.bpf.elf import ObjectError, read_object
from capsule.bpf.elf_sections import SectionType
from capsule.bpf.spec import ObjectSpec, ProgramSpec
from capsule.bpf.uapi import MapType, ProgType
from capsule.kernel.collection import LoadError, create_maps, load_object_btf, load_program
from capsule.kernel.errors import BPFError, VerifierError
from capsule.kernel.maps import Map
from capsule.kernel.sys import FD

TRAMPOLINE = {ProgType.TRACING, ProgType.LSM, ProgType.EXT, ProgType.STRUCT_OPS}
STORAGE = {MapType.CGROUP_STORAGE, MapType.PERCPU_CGROUP_STORAGE, MapType.SK_STORAGE, MapType.INODE_STORAGE,
           MapType.TASK_STORAGE, MapType.CGRP_STORAGE}
SURICATA_SECTIONS = {"filter": SectionType(ProgType.SOCKET_FILTER),
                     "loadbalancer": SectionType(ProgType.SOCKET_FILTER)}


def norm(s: str) -> str:
    s = re.sub(r"/\S+\.o", "OBJ", s)
    s = re.sub(r"'[^']*'", "'X'", s)
    s = re.sub(r"\b\d+\b", "N", s)
    return s[:140]


def expected_failures(spec: ObjectSpec) -> set[str]:
    """Functions the selftests mark ``__failure``."""
    out: set[str] = set()
    if spec.btf is None:
        return out
    for t in spec.btf.iter_types():  # type: ignore[attr-defined]
        if isinstance(t, DeclTag) and t.name == "comment:test_expect_failure":
            f = spec.btf.type_by_id(t.type)  # type: ignore[attr-defined]
            if isinstance(f, Func):
                out.add(f.name)
    return out


def load_reason(ps: ProgramSpec, maps: dict[str, Map], btf_fd: FD | None) -> str:
    if ps.type == ProgType.UNSPEC:
        return "section unknown: " + re.split(r"[/.]", ps.section, maxsplit=1)[0]
    try:
        p = load_program(ps, maps, btf_fd)
    except VerifierError as e:
        t = "trampoline " if ps.type in TRAMPOLINE else ""
        return f"verifier {t}{e.errno}: {norm(e.reason or '')}"
    except LoadError as e:
        return "load: " + norm(str(e).split(": ", 1)[-1])
    except BPFError as e:
        return f"bpf {e.errno}: {norm(e.message)}"
    p.close()
    return "ok"


def read(path: Path, suite: str, proposed: bool) -> ObjectSpec:
    if not proposed:
        return as_loaded(read_object(path))
    spec = read_object(path, section_types=SURICATA_SECTIONS if suite == "suricata" else None)
    keep = {n: m for n, m in spec.maps.items() if m.type in STORAGE}
    spec = as_loaded(spec)
    spec.maps.update(keep)
    return spec


def tally(out_path: str, limit: int | None, suites: list[str] | None, proposed: bool) -> None:
    taken: dict[str, int] = {}
    counts: collections.Counter = collections.Counter()
    t0 = time.time()
    with open(out_path, "w") as out:
        for o in load_manifest().built(suites):
            if limit is not None and taken.get(o.suite, 0) >= limit:
                continue
            taken[o.suite] = taken.get(o.suite, 0) + 1
            rec = dict(suite=o.suite, object=o.name, cpu=o.cpu)
            try:
                spec = read(Path(o.path), o.suite, proposed)
            except (ObjectError, OSError) as e:
                r = "unreadable: " + norm(str(e).split(": ", 1)[-1])
                counts[r] += 1
                out.write(json.dumps(dict(rec, program=None, reason=r, full=str(e)[:400])) + "\n")
                continue
            btf_fd, maps, err = None, {}, None
            try:
                btf_fd = load_object_btf(spec)
                maps = create_maps(spec, btf_fd)
            except (LoadError, BPFError, OSError) as e:
                err = "maps/btf: " + norm(str(e).split("\n")[0])
            xfail = expected_failures(spec)
            try:
                for name, ps in spec.programs.items():
                    r = err if err and ps.type != ProgType.UNSPEC else load_reason(ps, maps, btf_fd)
                    if r != "ok" and name in xfail:
                        r = "expected to fail (selftests __failure)"
                    counts[r] += 1
                    out.write(json.dumps(dict(rec, program=name, section=ps.section, type=ps.type, reason=r)) + "\n")
            finally:
                for m in maps.values():
                    m.close()
                if btf_fd is not None:
                    btf_fd.close()
    print(f"{time.time() - t0:.0f} s", file=sys.stderr)
    progs = {k: v for k, v in counts.items() if not k.startswith("unreadable")}
    print(f"programs: {sum(progs.values())}, loadable: {progs.get('ok', 0)}")
    for k, v in counts.most_common():
        print(f"{v:6d}  {k}")


_MAP_KINDS = ("BTF_LOAD", "SK_STORAGE", "TASK_STORAGE", "INODE_STORAGE", "CGRP_STORAGE", "CGROUP_STORAGE",
              "PROG_ARRAY", "ARRAY_OF_MAPS", "HASH_OF_MAPS", "USER_RINGBUF", "RINGBUF", "BLOOM", "STACK_TRACE")


def category(r: dict) -> str:
    x = r["reason"]
    if x == "ok":
        return "ok"
    if x.startswith("unreadable"):
        full = r.get("full", "")
        what = ("legacy maps section" if "section 'maps'" in full else
                "arena globals (.addr_space.1)" if "addr_space" in full else x[12:70])
        return "object unreadable: " + what
    if x.startswith("verifier trampoline"):
        return "needs a trampoline / attach_btf_id (TRACING, LSM, EXT, STRUCT_OPS)"
    if x.startswith("expected to fail"):
        return "verifier refuses (selftests __failure, expected)"
    if x.startswith("verifier"):
        return "verifier refuses (other)"
    if x.startswith("section unknown"):
        return "section name unknown: " + x.split(": ", 1)[1].lstrip("?")
    if x.startswith("maps/btf"):
        kind = next((k for k in _MAP_KINDS if k in x), x[10:70])
        return "map/BTF creation fails: " + kind
    if "cannot resolve" in x:
        return "unresolved reference (extern __ksym/__kconfig, linked)"
    if "kfunc" in x:
        return "kfunc not in kernel BTF (bpf_testmod)"
    if "extern" in x:
        return "extern not resolvable here: " + x.split(": ", 1)[1][-60:]
    return x[:80]


def compare(before_path: str, after_path: str) -> None:
    before = [json.loads(line) for line in open(before_path)]
    after = [json.loads(line) for line in open(after_path)]
    suites = sorted({r["suite"] for r in before})
    after = [r for r in after if r["suite"] in suites]
    for name, rows in (("before", before), ("after", after)):
        progs = [r for r in rows if r["program"]]
        unread = {(r["suite"], r["object"], r["cpu"]) for r in rows if not r["program"]}
        print(f"{name}: {len(progs)} programs, {sum(r['reason'] == 'ok' for r in progs)} loadable; "
              f"{len(unread)} objects unreadable")
        for s in suites:
            ps = [r for r in progs if r["suite"] == s]
            print(f"   {s:13s} {len(ps):5d} programs {sum(r['reason'] == 'ok' for r in ps):5d} loadable")
    cb = collections.Counter(category(r) for r in before)
    ca = collections.Counter(category(r) for r in after)
    print(f"{'category':75s} {'before':>7s} {'after':>7s}")
    small_b = small_a = 0
    for k in sorted(set(cb) | set(ca), key=lambda k: -max(cb[k], ca[k])):
        if max(cb[k], ca[k]) >= 4 or k == "ok":
            print(f"{k[:75]:75s} {cb[k]:7d} {ca[k]:7d}")
        else:
            small_b, small_a = small_b + cb[k], small_a + ca[k]
    print(f"{'(categories of fewer than 4 programs)':75s} {small_b:7d} {small_a:7d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--suite", action="append")
    ap.add_argument("--proposed", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        compare(*a.compare)
    elif a.out:
        tally(a.out, a.limit, a.suite, a.proposed)
    else:
        ap.error("give OUT.jsonl or --compare BEFORE AFTER")


if __name__ == "__main__":
    main()
