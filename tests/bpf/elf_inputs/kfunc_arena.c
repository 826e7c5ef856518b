// An arena map and the bpf_arena_alloc_pages kfunc (extern in .ksyms), from a sleepable SYSCALL program.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARENA);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 16);
    __ulong(map_extra, 1ull << 44);
} arena SEC(".maps");

void *bpf_arena_alloc_pages(void *map, void *addr, __u32 page_cnt, int node_id, __u64 flags) __ksym;
void bpf_arena_free_pages(void *map, void *ptr, __u32 page_cnt) __ksym;

__u64 got;

SEC("syscall")
int alloc(void *ctx)
{
    void *p = bpf_arena_alloc_pages(&arena, 0, 2, -1, 0);
    got = (__u64)p;
    if (p)
        bpf_arena_free_pages(&arena, p, 2);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
