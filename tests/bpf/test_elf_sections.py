"""capsule.bpf.elf_sections: section names mean what libbpf 1.x makes of them (type, expected attach type, flags)."""

from __future__ import annotations

import pytest

from capsule.bpf.elf_sections import BPF_F_SLEEPABLE, SectionType, section_for, section_type
from capsule.bpf.uapi import AttachType as A
from capsule.bpf.uapi import ProgType as P


@pytest.mark.parametrize(
    "name, expect",
    [
        # probes of every kind are KPROBE programs; only multi-probes and sessions tell the verifier
        ("kprobe", (P.KPROBE, 0, 0, "")),
        ("kprobe/do_unlinkat", (P.KPROBE, 0, 0, "do_unlinkat")),
        ("kretprobe/do_unlinkat", (P.KPROBE, 0, 0, "do_unlinkat")),
        ("uprobe", (P.KPROBE, 0, 0, "")),
        ("uprobe//proc/self/exe:main", (P.KPROBE, 0, 0, "/proc/self/exe:main")),
        ("uretprobe.s/libc.so.6:malloc", (P.KPROBE, 0, BPF_F_SLEEPABLE, "libc.so.6:malloc")),
        ("uprobe.s", (P.KPROBE, 0, BPF_F_SLEEPABLE, "")),
        ("kprobe.multi", (P.KPROBE, A.TRACE_KPROBE_MULTI, 0, "")),
        ("kprobe.multi/bpf_fentry_test*", (P.KPROBE, A.TRACE_KPROBE_MULTI, 0, "bpf_fentry_test*")),
        ("kretprobe.multi/x", (P.KPROBE, A.TRACE_KPROBE_MULTI, 0, "x")),
        ("kprobe.session/x", (P.KPROBE, A.TRACE_KPROBE_SESSION, 0, "x")),
        ("uprobe.multi/./x:y", (P.KPROBE, A.TRACE_UPROBE_MULTI, 0, "./x:y")),
        ("uprobe.multi.s", (P.KPROBE, A.TRACE_UPROBE_MULTI, BPF_F_SLEEPABLE, "")),
        ("ksyscall/connect", (P.KPROBE, 0, 0, "connect")),
        ("kretsyscall/connect", (P.KPROBE, 0, 0, "connect")),
        ("usdt/./bin:prov:probe", (P.KPROBE, 0, 0, "./bin:prov:probe")),
        ("usdt", (P.KPROBE, 0, 0, "")),
        # tracepoints with and without a target, sleepable and writable variants
        ("tracepoint", (P.TRACEPOINT, 0, 0, "")),
        ("tp/syscalls/sys_enter_getpid", (P.TRACEPOINT, 0, 0, "syscalls/sys_enter_getpid")),
        ("tp.s/syscalls/sys_enter_getpid", (P.TRACEPOINT, 0, BPF_F_SLEEPABLE, "syscalls/sys_enter_getpid")),
        ("raw_tp", (P.RAW_TRACEPOINT, 0, 0, "")),
        ("raw_tracepoint/filler/sys_open_x", (P.RAW_TRACEPOINT, 0, 0, "filler/sys_open_x")),
        ("raw_tp.w/bpf_testmod_test_writable", (P.RAW_TRACEPOINT_WRITABLE, 0, 0, "bpf_testmod_test_writable")),
        ("fentry.s/bpf_fentry_test1", (P.TRACING, A.TRACE_FENTRY, BPF_F_SLEEPABLE, "bpf_fentry_test1")),
        ("fmod_ret/x", (P.TRACING, A.MODIFY_RETURN, 0, "x")),
        ("freplace/x", (P.EXT, 0, 0, "x")),
        ("lsm_cgroup/socket_bind", (P.LSM, A.LSM_CGROUP, 0, "socket_bind")),
        ("iter.s/task", (P.TRACING, A.TRACE_ITER, BPF_F_SLEEPABLE, "task")),
        ("struct_ops/test_1", (P.STRUCT_OPS, 0, 0, "test_1")),
        # cgroup and socket programs: exact names with their attach types
        ("cgroup/skb", (P.CGROUP_SKB, 0, 0, "")),
        ("cgroup/connect4", (P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_CONNECT, 0, "")),
        ("cgroup/getsockname_unix", (P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_GETSOCKNAME, 0, "")),
        ("cgroup/sock", (P.CGROUP_SOCK, A.CGROUP_INET_SOCK_CREATE, 0, "")),
        ("cgroup/post_bind6", (P.CGROUP_SOCK, A.CGROUP_INET6_POST_BIND, 0, "")),
        ("cgroup/sysctl", (P.CGROUP_SYSCTL, A.CGROUP_SYSCTL, 0, "")),
        ("cgroup/getsockopt", (P.CGROUP_SOCKOPT, A.CGROUP_GETSOCKOPT, 0, "")),
        ("cgroup/dev", (P.CGROUP_DEVICE, A.CGROUP_DEVICE, 0, "")),
        ("sockops", (P.SOCK_OPS, A.CGROUP_SOCK_OPS, 0, "")),
        ("sk_skb", (P.SK_SKB, 0, 0, "")),
        ("sk_skb/stream_verdict", (P.SK_SKB, A.SK_SKB_STREAM_VERDICT, 0, "")),
        ("sk_msg", (P.SK_MSG, A.SK_MSG_VERDICT, 0, "")),
        ("sk_reuseport/migrate", (P.SK_REUSEPORT, A.SK_REUSEPORT_SELECT_OR_MIGRATE, 0, "")),
        ("sk_reuseport", (P.SK_REUSEPORT, A.SK_REUSEPORT_SELECT, 0, "")),
        ("flow_dissector", (P.FLOW_DISSECTOR, A.FLOW_DISSECTOR, 0, "")),
        ("lwt_xmit", (P.LWT_XMIT, 0, 0, "")),
        ("lirc_mode2", (P.LIRC_MODE2, A.LIRC_MODE2, 0, "")),
        ("netkit/peer", (P.SCHED_CLS, A.NETKIT_PEER, 0, "")),
    ],
)
def test_libbpf_section_names(name: str, expect: tuple) -> None:
    st = section_type(name)
    assert st is not None and (st.prog_type, st.expected_attach_type, st.flags, st.attach_to) == expect
    assert st.autoload


@pytest.mark.parametrize(
    "name",
    [
        "kprobe.multiple",  # "kprobe+" needs the bare name or "kprobe/"
        "kprobes/x",
        "cgroup/skb/x",  # exact names take no target
        "sk_skb1",
        "cgroup",
        "cgroup/",
        "sockops/x",
        "tc/ingress/x",
        "kprobe/",  # an empty target
        "?",
        "",
    ],
)
def test_names_libbpf_does_not_know(name: str) -> None:
    assert section_type(name) is None


def test_question_mark_means_not_autoloaded() -> None:
    st = section_type("?tc")
    assert st == SectionType(P.SCHED_CLS, 0, 0, "", autoload=False)
    st = section_type("?raw_tp/sys_enter")
    assert st is not None and (st.prog_type, st.attach_to, st.autoload) == (P.RAW_TRACEPOINT, "sys_enter", False)
    assert section_type("?nope") is None


@pytest.mark.parametrize(
    "args, name",
    [
        ((P.XDP, A.XDP, 0), "xdp"),
        ((P.SCHED_CLS, 0, 0), "tc"),
        ((P.KPROBE, 0, 0, "do_nanosleep"), "kprobe/do_nanosleep"),
        ((P.KPROBE, A.TRACE_KPROBE_MULTI, 0, "f*"), "kprobe.multi/f*"),
        ((P.TRACEPOINT, 0, 0), "tracepoint"),
        ((P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_BIND, 0), "cgroup/bind6"),
        ((P.SYSCALL, 0, BPF_F_SLEEPABLE), "syscall"),
        ((P.SYSCALL, 0, 0), "syscall"),  # no exact match: the type's first name
    ],
)
def test_section_for_is_the_inverse(args: tuple, name: str) -> None:
    assert section_for(*args) == name
    st = section_type(name)
    assert st is not None and st.prog_type == args[0]


def test_section_for_unknown_type() -> None:
    with pytest.raises(ValueError):
        section_for(999)
