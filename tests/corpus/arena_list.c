// BPF arena: a sleepable SYSCALL program allocates arena pages with the bpf_arena_alloc_pages kfunc, builds
// a linked list of nodes in address space 1 (clang emits addr_space_cast for every cast), then walks it and
// returns the sum. The arena's user-space mapping lets the host read the list back.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define __arena __attribute__((address_space(1)))

struct {
    __uint(type, BPF_MAP_TYPE_ARENA);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 4); /* pages */
} arena SEC(".maps");

extern void __arena *bpf_arena_alloc_pages(void *map, void __arena *addr, __u32 page_cnt, int node_id,
                                           __u64 flags) __ksym;

struct node {
    struct node __arena *next;
    __u64 value;
    __u32 tag;
};

struct node __arena *list_head;
__u64 list_sum;

SEC("syscall")
int arena_list(void *ctx)
{
    struct node __arena *page = bpf_arena_alloc_pages(&arena, NULL, 1, -1, 0);
    if (!page)
        return 1;
    struct node __arena *prev = NULL;
    for (int i = 0; i < 32; i++) {
        struct node __arena *n = &page[i];
        n->value = (__u64)i * i;
        n->tag = 0xab00 + i;
        n->next = prev;
        prev = n;
    }
    list_head = prev;
    __u64 sum = 0;
    int guard = 0;
    for (struct node __arena *n = prev; n && guard < 64; n = n->next, guard++)
        sum += n->value + (n->tag & 0xff);
    list_sum = sum;
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
