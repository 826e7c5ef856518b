"""capsule.kernel: a pure-Python layer over bpf(2) (maps, programs, BTF, links), in the spirit of cilium/ebpf.

``sys`` is the syscall and the ``union bpf_attr`` layouts; everything else builds on it. ``collection`` (the
ObjectSpec loader) sits on top of this API.
"""

from capsule.bpf.uapi import AttachType, MapFlags, MapType, ProgFlags, ProgType, XDPAction

from .arena import Arena
from .btf import load_btf, vmlinux_btf_id
from .consts import LogLevel, XDPFlags
from .errors import BPFError, BTFLoadError, VerifierError
from .link import Link, run_in_netns
from .maps import Map, possible_cpus
from .prog import Program, ProgramInfo, TestRunResult, bpf_stats
from .ringbuf import RingBuffer, create_ringbuf
from .sys import FD
from .verifier_log import VerifierStats, parse_stats

__all__ = [
    "Arena", "AttachType", "BPFError", "BTFLoadError", "FD", "Link", "LogLevel", "Map", "MapFlags", "MapType",
    "ProgFlags", "ProgType", "Program", "ProgramInfo", "RingBuffer", "TestRunResult", "VerifierError",
    "VerifierStats", "XDPAction", "XDPFlags", "bpf_stats", "create_ringbuf", "load_btf", "parse_stats",
    "possible_cpus", "run_in_netns", "vmlinux_btf_id",
]
