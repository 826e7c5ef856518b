"""Kernel profiles: what compiled code may use on a family of kernels, and picking the best one a kernel has.

A profile is pure data: which memory window (an arena, or mmapable array maps for kernels without arena),
whether loops may stay in a region behind ``may_goto``, the cpu version (and so ``gotol``), the kfuncs,
sleepable programs, atomics on the window, tail calls. ``needs`` turns it into the names of the probes
(``capsule.kernel.probe``) that must answer yes; ``best_profile`` picks the first of ``PROFILES`` (richest
first) whose needs a kernel meets. Nothing here loads anything or imports the compiler, so a build for
another kernel (``--profile map-v3``) can name a profile on any machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

MiB = 1 << 20
# an object built for a profile names it in this section (the name, ASCII); the kernel layer checks it before
# loading (``capsule.kernel.preflight``). ``.capsule*`` sections pass through capsule's ELF reader and writer.
PROFILE_SECTION = ".capsule.profile"
# the array value a map window needs: its largest piece is 128 MiB plus slack (capsule.compiler.window), so the
# probe's ladder (4, 16, 64, 256 MiB) must reach its 256 MiB rung
MAP_PIECE = 256 * MiB

# probes that every profile needs: the entry program is XDP run by BPF_PROG_TEST_RUN, its code lives in
# global subprograms (each verified once), and the dispatcher's jumps use JLT/JLE
BASE_NEEDS = ("xdp_test_run", "global_funcs", "cpu_v2")
# the probe behind each kfunc a profile may name
KFUNC_PROBES = {"bpf_arena_alloc_pages": "arena_alloc_pages"}


class Answer(Protocol):
    """What ``best_profile`` reads of a probe's result (``capsule.kernel.probe.ProbeResult``)."""

    @property
    def ok(self) -> bool: ...

    @property
    def value(self) -> int | None: ...


@dataclass(frozen=True)
class Profile:
    """What the compiler may use. ``kernels`` says where it is the best choice (for people, not for selection)."""

    name: str
    window: Literal["arena", "map"]
    may_goto: bool
    cpu: int  # 2, 3 or 4: the highest instruction set version the code may use
    gotol: bool
    kfuncs: tuple[str, ...]
    sleepable: bool
    window_atomics: bool
    tail_calls: bool
    kernels: str

    def needs(self) -> tuple[str, ...]:
        """The probes that must say yes on a kernel for this profile's code to load there."""
        need = list(BASE_NEEDS)
        need += ["arena"] if self.window == "arena" else ["mmapable_array", "array_value_max"]
        need += [f"cpu_v{v}" for v in range(3, self.cpu + 1)]
        need += ["gotol"] * self.gotol + ["may_goto"] * self.may_goto + ["sleepable"] * self.sleepable
        need += [KFUNC_PROBES[k] for k in self.kfuncs]
        if self.window_atomics:
            need.append("arena_atomics" if self.window == "arena" else "atomics")
        need += ["tail_calls"] * self.tail_calls
        return tuple(dict.fromkeys(need))

    def missing(self, answers: Mapping[str, Answer]) -> list[str]:
        """The needs of this profile that ``answers`` (probe name -> result) do not meet, in ``needs`` order.
        A probe that was not asked counts as missing."""
        out = []
        for name in self.needs():
            a = answers.get(name)
            if a is None or not a.ok:
                out.append(name)
            elif name == "array_value_max" and (a.value or 0) < MAP_PIECE:
                out.append(name)
        return out

    def build_options(self) -> dict[str, Any]:
        """The compiler's options (``capsule.compiler.Options`` keywords) this profile's code is built with."""
        return {"window": self.window, "may_goto": self.may_goto, "cpu": self.cpu}

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "window": self.window, "may_goto": self.may_goto, "cpu": self.cpu,
                "gotol": self.gotol, "kfuncs": list(self.kfuncs), "sleepable": self.sleepable,
                "window_atomics": self.window_atomics, "tail_calls": self.tail_calls, "kernels": self.kernels}


PROFILES: tuple[Profile, ...] = (
    Profile("arena-v4", "arena", may_goto=True, cpu=4, gotol=True, kfuncs=("bpf_arena_alloc_pages",),
            sleepable=True, window_atomics=True, tail_calls=True, kernels="6.12 and later (Debian 12 backports, 6.18)"),
    Profile("map-v4", "map", may_goto=False, cpu=4, gotol=True, kfuncs=(), sleepable=True, window_atomics=True,
            tail_calls=True, kernels="6.6 to 6.8 (Ubuntu 24.04's 6.8): cpu v4 but neither arena nor may_goto"),
    Profile("map-v3", "map", may_goto=False, cpu=3, gotol=False, kfuncs=(), sleepable=True, window_atomics=True,
            tail_calls=True, kernels="5.14 to 6.5 (Debian 12's 6.1, Ubuntu 22.04's 5.15): the bounded dispatcher"),
)
BY_NAME = {p.name: p for p in PROFILES}


class NoProfile(LookupError):
    """No profile fits the kernel (or a profile name is unknown); the message says what is missing."""


def profile(name: str) -> Profile:
    """The profile called ``name``; ``NoProfile`` naming the known ones otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise NoProfile(f"no kernel profile {name!r} (known: {', '.join(BY_NAME)})") from None


def best_profile(answers: Mapping[str, Answer]) -> Profile:
    """The richest profile whose needs ``answers`` meet; ``NoProfile`` saying what the last one lacks."""
    for p in PROFILES:
        if not p.missing(answers):
            return p
    last = PROFILES[-1]
    raise NoProfile(f"this kernel has no capsule profile: even {last.name} needs {', '.join(last.missing(answers))}")
