"""A ``PERF_EVENT_ARRAY`` declared without ``max_entries`` (the usual way: one slot per CPU) loads with one slot
per possible CPU, as libbpf sizes it; the kernel refuses a size of 0 with EINVAL (issue 16.7)."""

from __future__ import annotations

import pytest

from capsule.bpf.elf import read_object
from capsule.bpf.uapi import MapType
from capsule.kernel import possible_cpus
from capsule.kernel.collection import Collection
from tests.clang import compile_bpf

pytestmark = pytest.mark.requires_bpf

SOURCE = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
    __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
    __uint(key_size, sizeof(int));
    __uint(value_size, sizeof(int));
} events SEC(".maps");
SEC("xdp") int prog(struct xdp_md *ctx) {
    int v = 1;
    bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &v, sizeof(v));
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_unsized_perf_event_array_gets_one_slot_per_possible_cpu() -> None:
    spec = read_object(compile_bpf(SOURCE, "v3"))
    assert spec.maps["events"].type == MapType.PERF_EVENT_ARRAY and spec.maps["events"].max_entries == 0
    with Collection.load(spec) as coll:
        assert coll.maps["events"].max_entries == possible_cpus()
        assert coll.programs["prog"].test_run(bytes(64)).retval == 2


def test_a_given_size_is_kept() -> None:
    spec = read_object(compile_bpf(SOURCE.replace("__uint(value_size, sizeof(int));",
                                                  "__uint(value_size, sizeof(int)); __uint(max_entries, 3);"), "v3"))
    with Collection.load(spec) as coll:
        assert coll.maps["events"].max_entries == 3
