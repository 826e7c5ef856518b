// Several map kinds from one SYSCALL program: a PERCPU_ARRAY scratch slot, a HASH updated and deleted, an
// LRU_HASH, and a RINGBUF record reserved, filled and submitted; struct copies through the stack.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct event {
    __u64 id;
    __u32 kind;
    __u16 flags;
    __u8 tag[6];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct event);
} scratch SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 64);
    __type(key, __u64);
    __type(value, struct event);
} by_id SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 32);
    __type(key, __u32);
    __type(value, __u64);
} recent SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4096);
} events SEC(".maps");

__u64 next_id = 1;

SEC("syscall")
int maps_ringbuf(void *ctx)
{
    __u32 zero = 0;
    struct event *ev = bpf_map_lookup_elem(&scratch, &zero);
    if (!ev)
        return 1;
    ev->id = __sync_fetch_and_add(&next_id, 1);
    ev->kind = 3;
    ev->flags = 0x8001;
    for (int i = 0; i < 6; i++)
        ev->tag[i] = 'a' + i;
    struct event copy = *ev;
    if (bpf_map_update_elem(&by_id, &copy.id, &copy, BPF_ANY))
        return 2;
    __u32 k = (__u32)copy.id & 31;
    __u64 v = copy.id * 10;
    bpf_map_update_elem(&recent, &k, &v, BPF_ANY);
    struct event *rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
    if (!rec)
        return 3;
    *rec = copy;
    bpf_ringbuf_submit(rec, 0);
    if (copy.id % 4 == 0)
        bpf_map_delete_elem(&by_id, &copy.id);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
