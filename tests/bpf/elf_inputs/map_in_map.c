// Map-in-map and program-array definitions with initial slots (libbpf's __array(values, ...)).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct inner {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
};

struct inner inner_a SEC(".maps"), inner_b SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
    __uint(max_entries, 4);
    __type(key, __u32);
    __array(values, struct inner);
} outer SEC(".maps") = {
    .values = { [1] = &inner_a, [3] = &inner_b },
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
    __uint(max_entries, 8);
    __type(key, __u32);
    __array(values, struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, 16);
        __type(key, __u32);
        __type(value, __u32);
    });
} by_id SEC(".maps");

int tail(struct __sk_buff *skb);

struct {
    __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
    __uint(max_entries, 3);
    __uint(key_size, sizeof(__u32));
    __array(values, int (void *));
} jumps SEC(".maps") = {
    .values = { [2] = (void *)&tail },
};

SEC("tc")
int tail(struct __sk_buff *skb)
{
    return 42;
}

SEC("tc")
int entry(struct __sk_buff *skb)
{
    bpf_tail_call(skb, &jumps, 2);
    return 7;
}

SEC("tc")
int through_outer(struct __sk_buff *skb)
{
    __u32 k = 3, zero = 0;
    void *m = bpf_map_lookup_elem(&outer, &k);
    if (!m)
        return 1;
    __u64 *v = bpf_map_lookup_elem(m, &zero);
    if (!v)
        return 2;
    *v += 5;
    return bpf_map_lookup_elem(&by_id, &zero) ? 3 : 0;
}

char LICENSE[] SEC("license") = "GPL";
