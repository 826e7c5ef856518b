// SYSCALL program over global data: .data, .bss and .rodata of every width (8/16/32/64-bit loads and
// stores, signed and unsigned), a context struct passed by BPF_PROG_TEST_RUN, 64-bit constants that need
// ld_imm64, and negation.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct args {
    __u64 a;
    __u32 b;
    __u16 c;
    __u8 d;
    __s8 e;
    __s64 result;
};

__u8 g8 = 0x12;
__u16 g16 = 0x3456;
__u32 g32 = 0x789abcde;
__u64 g64 = 0x0123456789abcdefULL;
__s8 gs8 = -3;
__s16 gs16 = -300;
__s32 gs32 = -70000;
__u64 counter;
__u8 bytes[16];
const volatile __u64 seed = 0xfeedfacecafebeefULL;

SEC("syscall")
int syscall_globals(struct args *ctx)
{
    __u64 a = ctx->a;
    __u32 b = ctx->b;

    g8 += ctx->d;
    g16 ^= ctx->c;
    g32 = g32 * 33 + b;
    g64 = (g64 << 7 | g64 >> 57) ^ seed ^ a;
    counter++;
    for (int i = 0; i < 16; i++)
        bytes[i] = (__u8)(a >> (i % 8 * 8)) + i;
    __s64 s = (__s64)gs8 + gs16 + gs32 + ctx->e;
    ctx->result = -(s + (__s64)(g64 & 0xffffffffffULL) + 0x1122334455667788LL);
    return -(int)(g32 & 0x7fffffff);
}

char LICENSE[] SEC("license") = "GPL";
