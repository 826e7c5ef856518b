// Maps in the legacy "maps" section (struct bpf_map_def, as Suricata and the Sysdig probe declare them), one
// of them static (referenced through the section symbol plus its offset), with the two trailing fields of the
// Sysdig probe's definition left 0.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct bpf_map_def {
    unsigned int type;
    unsigned int key_size;
    unsigned int value_size;
    unsigned int max_entries;
    unsigned int map_flags;
    unsigned int inner_map_idx;
    unsigned int numa_node;
};

struct bpf_map_def SEC("maps") counts = {
    .type = BPF_MAP_TYPE_ARRAY,
    .key_size = sizeof(__u32),
    .value_size = sizeof(__u64),
    .max_entries = 4,
};

struct bpf_map_def SEC("maps") flows = {
    .type = BPF_MAP_TYPE_HASH,
    .key_size = sizeof(__u64),
    .value_size = sizeof(__u32),
    .max_entries = 128,
    .map_flags = BPF_F_NO_PREALLOC,
};

static struct bpf_map_def SEC("maps") hidden = {
    .type = BPF_MAP_TYPE_ARRAY,
    .key_size = sizeof(__u32),
    .value_size = sizeof(__u32),
    .max_entries = 2,
};

struct args { __u64 key; __u32 slot; __u32 value; };

SEC("syscall")
int legacy(struct args *a)
{
    __u32 slot = a->slot & 3, one = 1, value = a->value;
    __u64 key = a->key;
    __u64 *c = bpf_map_lookup_elem(&counts, &slot);
    if (c)
        *c += value;
    bpf_map_update_elem(&flows, &key, &value, BPF_ANY);
    __u32 *h = bpf_map_lookup_elem(&hidden, &one);
    if (h)
        *h = a->value + 1;
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
