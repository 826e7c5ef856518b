// BPF-to-BPF calls: static and global __noinline subprograms (global ones are verified separately and need
// BTF), a subprogram calling another, a bpf_loop callback (ld_imm64 of a function), and 5-argument calls.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 results[4];

static __noinline __u64 mix(__u64 x, __u64 y)
{
    x ^= y + 0x9e3779b97f4a7c15ULL + (x << 6) + (x >> 2);
    return x;
}

static __noinline __u64 five(__u64 a, __u64 b, __u64 c, __u64 d, __u64 e)
{
    return mix(a, b) + mix(c, d) * e;
}

__noinline int global_clamp(int v, int lo, int hi)
{
    if (v < lo)
        return lo;
    if (v > hi)
        return hi;
    return v;
}

struct loop_ctx {
    __u64 acc;
    __u32 steps;
};

static int loop_body(__u32 index, void *data)
{
    struct loop_ctx *lc = data;

    lc->acc = mix(lc->acc, index);
    lc->steps++;
    return index >= 40;
}

SEC("syscall")
int subprogs(void *ctx)
{
    struct loop_ctx lc = {.acc = 1};

    bpf_loop(100, loop_body, &lc, 0);
    results[0] = lc.acc;
    results[1] = lc.steps;
    results[2] = five(1, 2, 3, 4, lc.steps);
    results[3] = global_clamp((int)lc.acc, -1000, 1000);
    return global_clamp(lc.steps, 0, 50);
}

char LICENSE[] SEC("license") = "GPL";
