// A loop whose bound the verifier cannot know (it comes from the context), guarded by may_goto written as
// inline assembly (libbpf's cond_break): the verifier accepts it without walking every iteration, and the
// kernel cuts it off if it runs too long.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define cond_break                                         \
    ({                                                     \
        __label__ l_break, l_continue;                     \
        asm volatile goto("may_goto %l[l_break]" :::: l_break); \
        goto l_continue;                                   \
    l_break:                                               \
        break;                                             \
    l_continue:;                                           \
    })

struct req {
    __u64 n;
    __u64 sum;
    __u64 iterations;
};

SEC("syscall")
int may_goto_loop(struct req *r)
{
    __u64 n = r->n, sum = 0, i = 0;

    for (i = 0; i < n; i++) {
        cond_break;
        sum += i ^ (i >> 3);
    }
    r->sum = sum;
    r->iterations = i;
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
