"""libbpf's ELF section naming convention: which program type a section name means.

``SEC("xdp")`` makes an XDP program, ``SEC("tracepoint/syscalls/sys_enter_getpid")`` a tracepoint program
attached to that event, and so on (libbpf's ``section_defs``). Only the meaning is kept here (program type,
expected attach type, load flags); attaching is the kernel layer's business. Unknown names map to ``None``: an
object may carry sections capsule cannot load, and that is an error only when such a program is loaded
(``ProgramSpec.type == ProgType.UNSPEC``).

Names follow libbpf 1.x's strict matching. A pattern ending in ``+`` matches the bare name or the name followed
by ``/target`` (``kprobe`` and ``kprobe/do_unlinkat``, not ``kprobe.multi``; unlike libbpf, not an empty
target: ``kprobe/``); one ending in ``/`` needs a target; any other pattern must match exactly. A leading ``?``
(``SEC("?tc")``) means "not loaded by default" and does not change the type.
"""

from __future__ import annotations

from dataclasses import dataclass

from .uapi import AttachType, ProgFlags, ProgType

BPF_F_SLEEPABLE = int(ProgFlags.SLEEPABLE)
BPF_F_XDP_HAS_FRAGS = int(ProgFlags.XDP_HAS_FRAGS)
_S = BPF_F_SLEEPABLE
_FRAGS = BPF_F_XDP_HAS_FRAGS
A = AttachType


@dataclass(frozen=True)
class SectionType:
    prog_type: ProgType
    expected_attach_type: int = 0
    flags: int = 0
    attach_to: str = ""  # the part after the prefix: "syscalls/sys_enter_getpid"
    autoload: bool = True  # False for "?name": libbpf loads such a program only when asked to


def _d(prog_type: ProgType, attach: int = 0, flags: int = 0) -> SectionType:
    return SectionType(prog_type, attach, flags)


P = ProgType
# In libbpf's order; the first match wins. Probes of every kind (kprobe, uprobe, ksyscall, usdt) are KPROBE
# programs: what they probe is chosen when attaching, except for multi-probes, which the verifier must know of.
_DEFS: list[tuple[str, SectionType]] = [
    ("socket", _d(P.SOCKET_FILTER)),
    ("sk_reuseport/migrate", _d(P.SK_REUSEPORT, A.SK_REUSEPORT_SELECT_OR_MIGRATE)),
    ("sk_reuseport", _d(P.SK_REUSEPORT, A.SK_REUSEPORT_SELECT)),
    ("kprobe+", _d(P.KPROBE)),
    ("uprobe+", _d(P.KPROBE)),
    ("uprobe.s+", _d(P.KPROBE, 0, _S)),
    ("kretprobe+", _d(P.KPROBE)),
    ("uretprobe+", _d(P.KPROBE)),
    ("uretprobe.s+", _d(P.KPROBE, 0, _S)),
    ("kprobe.multi+", _d(P.KPROBE, A.TRACE_KPROBE_MULTI)),
    ("kretprobe.multi+", _d(P.KPROBE, A.TRACE_KPROBE_MULTI)),
    ("kprobe.session+", _d(P.KPROBE, A.TRACE_KPROBE_SESSION)),
    ("uprobe.multi+", _d(P.KPROBE, A.TRACE_UPROBE_MULTI)),
    ("uretprobe.multi+", _d(P.KPROBE, A.TRACE_UPROBE_MULTI)),
    ("uprobe.session+", _d(P.KPROBE, A.TRACE_UPROBE_SESSION)),
    ("uprobe.multi.s+", _d(P.KPROBE, A.TRACE_UPROBE_MULTI, _S)),
    ("uretprobe.multi.s+", _d(P.KPROBE, A.TRACE_UPROBE_MULTI, _S)),
    ("uprobe.session.s+", _d(P.KPROBE, A.TRACE_UPROBE_SESSION, _S)),
    ("ksyscall+", _d(P.KPROBE)),
    ("kretsyscall+", _d(P.KPROBE)),
    # libbpf attaches USDTs through uprobe-multi links where the kernel has them; as a plain KPROBE program
    # the verifier checks the same code
    ("usdt+", _d(P.KPROBE)),
    ("usdt.s+", _d(P.KPROBE, 0, _S)),
    ("tc/ingress", _d(P.SCHED_CLS, A.TCX_INGRESS)),
    ("tc/egress", _d(P.SCHED_CLS, A.TCX_EGRESS)),
    ("tcx/ingress", _d(P.SCHED_CLS, A.TCX_INGRESS)),
    ("tcx/egress", _d(P.SCHED_CLS, A.TCX_EGRESS)),
    ("tc", _d(P.SCHED_CLS)),
    ("classifier", _d(P.SCHED_CLS)),
    ("action", _d(P.SCHED_ACT)),
    ("netkit/primary", _d(P.SCHED_CLS, A.NETKIT_PRIMARY)),
    ("netkit/peer", _d(P.SCHED_CLS, A.NETKIT_PEER)),
    ("tracepoint+", _d(P.TRACEPOINT)),
    ("tp+", _d(P.TRACEPOINT)),
    ("tracepoint.s+", _d(P.TRACEPOINT, 0, _S)),
    ("tp.s+", _d(P.TRACEPOINT, 0, _S)),
    ("raw_tracepoint+", _d(P.RAW_TRACEPOINT)),
    ("raw_tp+", _d(P.RAW_TRACEPOINT)),
    ("raw_tracepoint.s+", _d(P.RAW_TRACEPOINT, 0, _S)),
    ("raw_tp.s+", _d(P.RAW_TRACEPOINT, 0, _S)),
    ("raw_tracepoint.w+", _d(P.RAW_TRACEPOINT_WRITABLE)),
    ("raw_tp.w+", _d(P.RAW_TRACEPOINT_WRITABLE)),
    # BTF-attached programs: the kernel wants attach_btf_id (and a trampoline) to load them
    ("tp_btf+", _d(P.TRACING, A.TRACE_RAW_TP)),
    ("tp_btf.s+", _d(P.TRACING, A.TRACE_RAW_TP, _S)),
    ("fentry+", _d(P.TRACING, A.TRACE_FENTRY)),
    ("fmod_ret+", _d(P.TRACING, A.MODIFY_RETURN)),
    ("fexit+", _d(P.TRACING, A.TRACE_FEXIT)),
    ("fentry.s+", _d(P.TRACING, A.TRACE_FENTRY, _S)),
    ("fmod_ret.s+", _d(P.TRACING, A.MODIFY_RETURN, _S)),
    ("fexit.s+", _d(P.TRACING, A.TRACE_FEXIT, _S)),
    ("freplace+", _d(P.EXT)),
    ("lsm+", _d(P.LSM, A.LSM_MAC)),
    ("lsm.s+", _d(P.LSM, A.LSM_MAC, _S)),
    ("lsm_cgroup+", _d(P.LSM, A.LSM_CGROUP)),
    ("iter+", _d(P.TRACING, A.TRACE_ITER)),
    ("iter.s+", _d(P.TRACING, A.TRACE_ITER, _S)),
    ("syscall", _d(P.SYSCALL, 0, _S)),
    ("xdp.frags/devmap", _d(P.XDP, A.XDP_DEVMAP, _FRAGS)),
    ("xdp/devmap", _d(P.XDP, A.XDP_DEVMAP)),
    ("xdp.frags/cpumap", _d(P.XDP, A.XDP_CPUMAP, _FRAGS)),
    ("xdp/cpumap", _d(P.XDP, A.XDP_CPUMAP)),
    ("xdp.frags", _d(P.XDP, A.XDP, _FRAGS)),
    ("xdp", _d(P.XDP, A.XDP)),
    ("perf_event", _d(P.PERF_EVENT)),
    ("lwt_in", _d(P.LWT_IN)),
    ("lwt_out", _d(P.LWT_OUT)),
    ("lwt_xmit", _d(P.LWT_XMIT)),
    ("lwt_seg6local", _d(P.LWT_SEG6LOCAL)),
    ("sockops", _d(P.SOCK_OPS, A.CGROUP_SOCK_OPS)),
    ("sk_skb/stream_parser", _d(P.SK_SKB, A.SK_SKB_STREAM_PARSER)),
    ("sk_skb/stream_verdict", _d(P.SK_SKB, A.SK_SKB_STREAM_VERDICT)),
    ("sk_skb/verdict", _d(P.SK_SKB, A.SK_SKB_VERDICT)),
    ("sk_skb", _d(P.SK_SKB)),
    ("sk_msg", _d(P.SK_MSG, A.SK_MSG_VERDICT)),
    ("lirc_mode2", _d(P.LIRC_MODE2, A.LIRC_MODE2)),
    ("flow_dissector", _d(P.FLOW_DISSECTOR, A.FLOW_DISSECTOR)),
    ("cgroup_skb/ingress", _d(P.CGROUP_SKB, A.CGROUP_INET_INGRESS)),
    ("cgroup_skb/egress", _d(P.CGROUP_SKB, A.CGROUP_INET_EGRESS)),
    ("cgroup/skb", _d(P.CGROUP_SKB)),
    ("cgroup/sock_create", _d(P.CGROUP_SOCK, A.CGROUP_INET_SOCK_CREATE)),
    ("cgroup/sock_release", _d(P.CGROUP_SOCK, A.CGROUP_INET_SOCK_RELEASE)),
    ("cgroup/sock", _d(P.CGROUP_SOCK, A.CGROUP_INET_SOCK_CREATE)),
    ("cgroup/post_bind4", _d(P.CGROUP_SOCK, A.CGROUP_INET4_POST_BIND)),
    ("cgroup/post_bind6", _d(P.CGROUP_SOCK, A.CGROUP_INET6_POST_BIND)),
    ("cgroup/bind4", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_BIND)),
    ("cgroup/bind6", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_BIND)),
    ("cgroup/connect4", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_CONNECT)),
    ("cgroup/connect6", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_CONNECT)),
    ("cgroup/connect_unix", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_CONNECT)),
    ("cgroup/sendmsg4", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UDP4_SENDMSG)),
    ("cgroup/sendmsg6", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UDP6_SENDMSG)),
    ("cgroup/sendmsg_unix", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_SENDMSG)),
    ("cgroup/recvmsg4", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UDP4_RECVMSG)),
    ("cgroup/recvmsg6", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UDP6_RECVMSG)),
    ("cgroup/recvmsg_unix", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_RECVMSG)),
    ("cgroup/getpeername4", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_GETPEERNAME)),
    ("cgroup/getpeername6", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_GETPEERNAME)),
    ("cgroup/getpeername_unix", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_GETPEERNAME)),
    ("cgroup/getsockname4", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_GETSOCKNAME)),
    ("cgroup/getsockname6", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_GETSOCKNAME)),
    ("cgroup/getsockname_unix", _d(P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_GETSOCKNAME)),
    ("cgroup/sysctl", _d(P.CGROUP_SYSCTL, A.CGROUP_SYSCTL)),
    ("cgroup/getsockopt", _d(P.CGROUP_SOCKOPT, A.CGROUP_GETSOCKOPT)),
    ("cgroup/setsockopt", _d(P.CGROUP_SOCKOPT, A.CGROUP_SETSOCKOPT)),
    ("cgroup/dev", _d(P.CGROUP_DEVICE, A.CGROUP_DEVICE)),
    ("struct_ops+", _d(P.STRUCT_OPS)),
    ("struct_ops.s+", _d(P.STRUCT_OPS, 0, _S)),
    ("sk_lookup", _d(P.SK_LOOKUP, A.SK_LOOKUP)),
    ("netfilter", _d(P.NETFILTER, A.NETFILTER)),
]


def _match(pattern: str, name: str) -> str | None:
    """The attach target ("" when none) if ``name`` matches ``pattern``, else None."""
    if pattern.endswith("/"):
        return name[len(pattern) :] if name.startswith(pattern) and len(name) > len(pattern) else None
    if pattern.endswith("+"):
        base = pattern[:-1]
        if name == base:
            return ""
        return name[len(base) + 1 :] if name.startswith(base + "/") and len(name) > len(base) + 1 else None
    return "" if name == pattern else None


def section_type(section: str) -> SectionType | None:
    """What libbpf would make of a program in ``section``; None when the name is not one it knows."""
    autoload = not section.startswith("?")
    name = section if autoload else section[1:]
    for pattern, st in _DEFS:
        target = _match(pattern, name)
        if target is not None:
            return SectionType(st.prog_type, st.expected_attach_type, st.flags, target, autoload)
    return None


def section_for(prog_type: int, expected_attach_type: int = 0, flags: int = 0, attach_to: str = "") -> str:
    """The conventional section name for a program of this type (the writer's inverse of ``section_type``)."""
    want = (prog_type, expected_attach_type, flags)
    if attach_to:
        for pattern, st in _DEFS:
            if pattern[-1] in "+/" and (st.prog_type, st.expected_attach_type, st.flags) == want:
                return pattern.rstrip("+/") + "/" + attach_to
    for pattern, st in _DEFS:
        if (st.prog_type, st.expected_attach_type, st.flags) == want:
            return pattern.rstrip("+")
    for pattern, st in _DEFS:
        if st.prog_type == prog_type:
            return pattern.rstrip("+")
    raise ValueError(f"no conventional section name for program type {prog_type}")
