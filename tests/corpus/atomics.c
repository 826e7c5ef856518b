// capsule-corpus: v3
// Atomic memory operations on global data and map values, 32- and 64-bit: lock add/or/and/xor, their fetch
// variants, xchg and cmpxchg (BPF_ATOMIC needs cpu v3 once a fetched value is used).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 4);
    __type(key, __u32);
    __type(value, __u64);
} slots SEC(".maps");

__u64 a64;
__u32 a32;
__u64 flags64 = 0xff;
__u32 flags32 = 0xf0;
__u64 observed[12];

SEC("syscall")
int atomics(void *ctx)
{
    __u32 key = 1;
    __u64 *slot = bpf_map_lookup_elem(&slots, &key);
    if (!slot)
        return 1;

    __sync_fetch_and_add(&a64, 5);
    __sync_fetch_and_add(&a32, 6);
    __sync_fetch_and_or(&flags64, 0x100);
    __sync_fetch_and_and(&flags32, 0x3c);
    __sync_fetch_and_xor(&flags64, 0x11);
    observed[0] = __sync_fetch_and_add(&a64, 7);
    observed[1] = __sync_fetch_and_add(&a32, 8);
    observed[2] = __sync_fetch_and_or(&flags64, 0x2000);
    observed[3] = __sync_fetch_and_and(&flags32, 0x1f);
    observed[4] = __sync_fetch_and_xor(&flags64, 0x3);
    observed[5] = __sync_fetch_and_xor(&flags32, 0x5);
    observed[6] = __sync_val_compare_and_swap(&a64, 12, 100);
    observed[7] = __sync_val_compare_and_swap(&a32, 14, 200);
    observed[8] = __atomic_exchange_n(&a64, 1000, __ATOMIC_SEQ_CST);
    observed[9] = __atomic_exchange_n(&a32, 2000, __ATOMIC_SEQ_CST);
    observed[10] = __sync_fetch_and_add(slot, 1);
    observed[11] = __sync_val_compare_and_swap(slot, observed[10] + 1, 77);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
