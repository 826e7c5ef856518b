// Loops and branches in a SYSCALL program: bounded for/while loops (one nested), a switch with many cases,
// unsigned division/modulo/shifts, and a small state machine over an input buffer copied from the context
// into global data (the verifier refuses variable-offset context reads).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct input {
    __u8 text[64];
    __u32 len;
    __u32 out_words;
    __u64 out_hash;
    __u32 out_digits;
    __u32 out_collatz;
};

static __always_inline int kind(__u8 c)
{
    switch (c) {
    case ' ':
    case '\t':
    case '\n':
        return 0;
    case '0' ... '9':
        return 1;
    case 'a' ... 'z':
    case 'A' ... 'Z':
        return 2;
    case '.':
    case ',':
    case ';':
        return 3;
    default:
        return 4;
    }
}

__u8 text[64];

SEC("syscall")
int loops_switch(struct input *in)
{
    __u32 len = in->len;
    __u32 words = 0, digits = 0;
    __u64 hash = 5381;
    int prev = 0;

    __builtin_memcpy(text, in->text, sizeof(text));
    if (len > sizeof(text))
        len = sizeof(text);
    for (__u32 i = 0; i < len && i < sizeof(text); i++) {
        __u8 c = text[i];
        int k = kind(c);
        if (k == 2 && prev != 2)
            words++;
        if (k == 1)
            digits++;
        hash = hash * 33 + c;
        prev = k;
    }
    __u64 n = hash % 1000 + 1, steps = 0;
    while (n != 1 && steps < 200) {
        n = (n & 1) ? 3 * n + 1 : n / 2;
        steps++;
    }
    __u32 grid = 0;
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 8; c++)
            grid += (r * c) % 7 == (__u32)(hash >> (r + c)) % 7;
    in->out_words = words;
    in->out_digits = digits;
    in->out_hash = hash / 3 + (hash >> 33) + grid;
    in->out_collatz = steps;
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
