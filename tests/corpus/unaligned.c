// Unaligned and mixed-width packet access in XDP: a packed header read at an odd offset (byte loads combined
// by shifts on BPF), __builtin_memcpy of 2/4/8 bytes, stores back into the packet, and __builtin_bswap*
// (be16/be32/be64 before cpu v4, bswap on v4).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct wire {
    __u8 kind;
    __u16 port;
    __u32 seq;
    __u64 stamp;
} __attribute__((packed));

__u64 last_stamp;
__u32 last_seq;
__u16 last_port;

SEC("xdp")
int unaligned(struct xdp_md *ctx)
{
    __u8 *data = (void *)(long)ctx->data;
    __u8 *end = (void *)(long)ctx->data_end;
    struct wire *w = (void *)(data + 1);

    if ((void *)(w + 1) > (void *)end)
        return XDP_PASS;
    if (w->kind != 0x5a)
        return XDP_PASS;
    __u32 seq;
    __u64 stamp;
    __builtin_memcpy(&seq, &w->seq, sizeof(seq));
    __builtin_memcpy(&stamp, &w->stamp, sizeof(stamp));
    last_port = __builtin_bswap16(w->port);
    last_seq = __builtin_bswap32(seq);
    last_stamp = __builtin_bswap64(stamp);
    seq += 1;
    __builtin_memcpy(&w->seq, &seq, sizeof(seq));
    data[0] ^= 0xff;
    return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
