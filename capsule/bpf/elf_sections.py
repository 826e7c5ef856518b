"""libbpf's ELF section naming convention: which program type a section name means.

``SEC("xdp")`` makes an XDP program, ``SEC("tracepoint/syscalls/sys_enter_getpid")`` a tracepoint program
attached to that event, and so on (libbpf's ``section_defs``). Only the meaning is kept here; attaching is the
kernel layer's business. Unknown names map to ``None``: an object may carry sections capsule cannot load, and
that is an error only when such a program is loaded (``ProgramSpec.type == ProgType.UNSPEC``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .uapi import AttachType, ProgFlags, ProgType

BPF_F_SLEEPABLE = int(ProgFlags.SLEEPABLE)
BPF_F_XDP_HAS_FRAGS = int(ProgFlags.XDP_HAS_FRAGS)


@dataclass(frozen=True)
class SectionType:
    prog_type: int
    expected_attach_type: int = 0
    flags: int = 0
    attach_to: str = ""  # the part after the prefix: "syscalls/sys_enter_getpid"


# (name, exact?) -> meaning. Exact names must match fully; prefixes take "prefix/target".
_EXACT: dict[str, SectionType] = {
    "socket": SectionType(ProgType.SOCKET_FILTER),
    "tc": SectionType(ProgType.SCHED_CLS),
    "classifier": SectionType(ProgType.SCHED_CLS),
    "action": SectionType(ProgType.SCHED_ACT),
    "tc/ingress": SectionType(ProgType.SCHED_CLS, AttachType.TCX_INGRESS),
    "tc/egress": SectionType(ProgType.SCHED_CLS, AttachType.TCX_EGRESS),
    "tcx/ingress": SectionType(ProgType.SCHED_CLS, AttachType.TCX_INGRESS),
    "tcx/egress": SectionType(ProgType.SCHED_CLS, AttachType.TCX_EGRESS),
    "xdp": SectionType(ProgType.XDP, AttachType.XDP),
    "xdp.frags": SectionType(ProgType.XDP, AttachType.XDP, BPF_F_XDP_HAS_FRAGS),
    "xdp/devmap": SectionType(ProgType.XDP, AttachType.XDP_DEVMAP),
    "xdp.frags/devmap": SectionType(ProgType.XDP, AttachType.XDP_DEVMAP, BPF_F_XDP_HAS_FRAGS),
    "xdp/cpumap": SectionType(ProgType.XDP, AttachType.XDP_CPUMAP),
    "xdp.frags/cpumap": SectionType(ProgType.XDP, AttachType.XDP_CPUMAP, BPF_F_XDP_HAS_FRAGS),
    "syscall": SectionType(ProgType.SYSCALL, 0, BPF_F_SLEEPABLE),
    "perf_event": SectionType(ProgType.PERF_EVENT),
    "cgroup_skb/ingress": SectionType(ProgType.CGROUP_SKB, AttachType.CGROUP_INET_INGRESS),
    "cgroup_skb/egress": SectionType(ProgType.CGROUP_SKB, AttachType.CGROUP_INET_EGRESS),
    "sk_lookup": SectionType(ProgType.SK_LOOKUP, AttachType.SK_LOOKUP),
    "netfilter": SectionType(ProgType.NETFILTER, AttachType.NETFILTER),
}

_PREFIX: list[tuple[str, SectionType]] = [
    ("tracepoint/", SectionType(ProgType.TRACEPOINT)),
    ("tp/", SectionType(ProgType.TRACEPOINT)),
    ("raw_tracepoint/", SectionType(ProgType.RAW_TRACEPOINT)),
    ("raw_tp/", SectionType(ProgType.RAW_TRACEPOINT)),
    ("raw_tracepoint.w/", SectionType(ProgType.RAW_TRACEPOINT_WRITABLE)),
    ("raw_tp.w/", SectionType(ProgType.RAW_TRACEPOINT_WRITABLE)),
    ("tp_btf/", SectionType(ProgType.TRACING, AttachType.TRACE_RAW_TP)),
    ("fentry/", SectionType(ProgType.TRACING, AttachType.TRACE_FENTRY)),
    ("fentry.s/", SectionType(ProgType.TRACING, AttachType.TRACE_FENTRY, BPF_F_SLEEPABLE)),
    ("fexit/", SectionType(ProgType.TRACING, AttachType.TRACE_FEXIT)),
    ("fexit.s/", SectionType(ProgType.TRACING, AttachType.TRACE_FEXIT, BPF_F_SLEEPABLE)),
    ("lsm/", SectionType(ProgType.LSM, AttachType.LSM_MAC)),
    ("lsm.s/", SectionType(ProgType.LSM, AttachType.LSM_MAC, BPF_F_SLEEPABLE)),
    ("iter/", SectionType(ProgType.TRACING, AttachType.TRACE_ITER)),
    ("kprobe/", SectionType(ProgType.KPROBE)),
    ("kretprobe/", SectionType(ProgType.KPROBE)),
]


def section_type(section: str) -> SectionType | None:
    """What libbpf would make of a program in ``section``; None when the name is not one it knows."""
    st = _EXACT.get(section)
    if st is not None:
        return st
    for prefix, st in _PREFIX:
        if section.startswith(prefix) and len(section) > len(prefix):
            return SectionType(st.prog_type, st.expected_attach_type, st.flags, section[len(prefix) :])
    return None


def section_for(prog_type: int, expected_attach_type: int = 0, flags: int = 0, attach_to: str = "") -> str:
    """The conventional section name for a program of this type (the writer's inverse of ``section_type``)."""
    for name, st in _EXACT.items():
        if (st.prog_type, st.expected_attach_type, st.flags) == (prog_type, expected_attach_type, flags):
            return name
    if attach_to:
        for prefix, st in _PREFIX:
            if (st.prog_type, st.expected_attach_type, st.flags) == (prog_type, expected_attach_type, flags):
                return prefix + attach_to
    for name, st in _EXACT.items():
        if st.prog_type == prog_type:
            return name
    raise ValueError(f"no conventional section name for program type {prog_type}")
