// The hand-written BPF side of `capsule bench hooks`: the parsing work of parse.c (Ethernet with VLAN tags,
// IPv4 with options, IPv6 (its fixed header), TCP with every option, UDP ports), the way a clang
// program has to be written: bounds checked against data_end before every read, loops with constant bounds.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define MAX_VLANS 2
#define MAX_OPTS 10

__u64 by_protocol[256];
__u64 malformed, mss_sum, ports_sum;

static __always_inline __u16 be16(const __u8 *p) { return (__u16)(p[0] << 8 | p[1]); }

SEC("xdp")
int parse(struct xdp_md *ctx)
{
    const __u8 *d = (const __u8 *)(long)ctx->data, *end = (const __u8 *)(long)ctx->data_end;
    if (d + 14 > end)
        goto bad;
    __u16 type = be16(d + 12);
    const __u8 *p = d + 14;
    for (int k = 0; k < MAX_VLANS && (type == 0x8100 || type == 0x88a8); k++) {
        if (p + 4 > end)
            goto bad;
        type = be16(p + 2);
        p += 4;
    }
    __u8 proto;
    const __u8 *l4, *l4_end;
    if (type == 0x0800) {
        if (p + 20 > end)
            goto bad;
        __u32 hlen = (p[0] & 15) * 4, total = be16(p + 2);
        if (p[0] >> 4 != 4 || hlen < 20 || total < hlen || p + total > end)
            goto bad;
        proto = p[9];
        l4 = p + hlen;
        l4_end = p + total;
    } else if (type == 0x86dd) {
        if (p + 40 > end)
            goto bad;
        if (p[0] >> 4 != 6)
            goto bad;
        l4_end = p + 40 + be16(p + 4);
        if (l4_end > end)
            goto bad;
        proto = p[6];
        l4 = p + 40;
    } else {
        return XDP_PASS;
    }
    by_protocol[proto]++;
    if (proto == 6) {
        if (l4 + 20 > l4_end || l4 + 20 > end)
            goto bad;
        __u32 hlen = (l4[12] >> 4) * 4;
        if (hlen < 20 || l4 + hlen > l4_end)
            goto bad;
        ports_sum += be16(l4) + be16(l4 + 2);
        const __u8 *o = l4 + 20, *o_end = l4 + hlen;
        for (int k = 0; k < MAX_OPTS && o < o_end; k++) {
            if (o + 1 > end)
                goto bad;
            __u8 kind = o[0];
            if (kind == 0)
                break;
            if (kind == 1) {
                o++;
                continue;
            }
            if (o + 2 > end || o + 2 > o_end || o[1] < 2 || o + o[1] > o_end)
                break;
            if (kind == 2 && o[1] == 4) {
                if (o + 4 > end)
                    goto bad;
                mss_sum += be16(o + 2);
            }
            o += o[1];
        }
    } else if (proto == 17) {
        if (l4 + 8 > l4_end || l4 + 8 > end)
            goto bad;
        ports_sum += be16(l4) + be16(l4 + 2);
    }
    return XDP_PASS;
bad:
    malformed++;
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
