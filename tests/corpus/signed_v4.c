// capsule-corpus: v4
// cpu v4 arithmetic: signed division and modulo (sdiv/smod, 32 and 64 bit), sign-extending moves (movsx) and
// loads (ldsx) of 8/16/32-bit values, and unconditional byte swaps (bswap16/32/64 from __builtin_bswap*).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct sargs {
    __s64 a;
    __s64 b;
    __s32 c;
    __s32 d;
    __s8 s8;
    __u8 pad0;
    __s16 s16;
    __s32 s32;
    __s64 out[8];
};

SEC("syscall")
int signed_v4(struct sargs *x)
{
    __s64 a = x->a, b = x->b;
    __s32 c = x->c, d = x->d;

    if (b == 0 || d == 0 || (b == -1 && a == (__s64)0x8000000000000000LL) || (d == -1 && c == (__s32)0x80000000))
        return -1;
    x->out[0] = a / b;
    x->out[1] = a % b;
    x->out[2] = c / d;
    x->out[3] = c % d;
    x->out[4] = (__s64)x->s8 + x->s16 + x->s32;
    x->out[5] = (__s64)(__s8)a + (__s16)b + (__s32)(a ^ b);
    x->out[6] = __builtin_bswap64(a) ^ __builtin_bswap32(c) ^ __builtin_bswap16(d);
    x->out[7] = (a / 7) + (c % -5);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
