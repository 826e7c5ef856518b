// Maps, global data in every kind of section, static and global subprograms, several programs per section.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct pair { __u32 a; __u64 b; };

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 16);
    __type(key, __u32);
    __type(value, struct pair);
} pairs SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __uint(key_size, 8);
    __uint(value_size, 4);
    __uint(map_flags, BPF_F_NO_PREALLOC);
} sized SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4096);
} events SEC(".maps");

volatile const __u32 limit = 7;          /* .rodata */
__u64 counter;                           /* .bss */
__u32 seed = 0x1234;                     /* .data */
static __u32 hidden = 5;                 /* .data, static: relocated through the section symbol */
__u32 extra[4] SEC(".data.extra") = {1, 2, 3, 4};

static __noinline __u32 mix(__u32 x)
{
    return x * 31 + hidden;
}

__noinline int global_add(int a, int b)
{
    return a + b + (int)mix((__u32)a);
}

SEC("xdp")
int prog_one(struct xdp_md *ctx)
{
    __u32 k = 0;
    struct pair *p = bpf_map_lookup_elem(&pairs, &k);
    if (p)
        p->b += mix(seed);
    counter += global_add(limit, extra[2]);
    return XDP_PASS;
}

SEC("xdp")
int prog_two(struct xdp_md *ctx)
{
    __u64 key = 1;
    __u32 *v = bpf_map_lookup_elem(&sized, &key);
    if (v)
        *v = mix(*v);
    return XDP_DROP;
}

SEC("syscall")
int prog_sys(void *ctx)
{
    counter = global_add(1, 2);
    return 0;
}

SEC("tracepoint/syscalls/sys_enter_getpid")
int prog_tp(void *ctx)
{
    bpf_ringbuf_output(&events, &counter, sizeof(counter), 0);
    return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
