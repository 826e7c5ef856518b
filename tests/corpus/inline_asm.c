// capsule-corpus: v4
// Instructions clang rarely chooses on its own, written as inline assembly so the corpus covers them: gotol
// (the 32-bit-offset jump), le16/le32/le64 (truncating no-ops on little endian), be16/be32/be64, bswap,
// 32-bit movsx and ld_imm64 of a negative value.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct regs {
    __u64 in;
    __u64 out[6];
};

SEC("syscall")
int inline_asm(struct regs *r)
{
    __u64 x = r->in, y = r->in, z = r->in, s = r->in;
    __u64 m = 0;

    asm volatile("%0 = le16 %0" : "+r"(x));
    asm volatile("%0 = be32 %0" : "+r"(y));
    asm volatile("%0 = bswap64 %0" : "+r"(z));
    asm volatile("%0 = le64 %0\n\t%0 = be64 %0\n\t%0 = le32 %0" : "+r"(s));
    asm volatile("w0 = (s8)w1\n\tw0 = (s16)w0\n\t%0 = r0" : "=r"(m) : : "r0", "r1");
    r->out[0] = x;
    r->out[1] = y;
    r->out[2] = z;
    r->out[3] = s;
    r->out[4] = m;
    asm volatile goto("if %0 > 100 goto %l[big]" : : "r"(x) : : big);
    asm volatile goto("gotol %l[done]" :::: done);
big:
    r->out[5] = 0xdeadbeefcafef00dULL;
done:
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
