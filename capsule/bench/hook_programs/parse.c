/* The capsule side of `capsule bench hooks`: the parsing work of parse.bpf.c as ordinary C, with loops of any
 * length (no constant bounds needed: the per-packet budget bounds them). */
#include <capsule_hook.h>

uint64_t by_protocol[256];
uint64_t malformed, mss_sum, ports_sum;

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

CAPSULE_HANDLER int on_packet(const uint8_t *d, uint32_t len, struct capsule_packet_info *info) {
    (void)len;
    uint32_t n = info->captured;
    if (n < 14)
        goto bad;
    unsigned type = be16(d + 12);
    uint32_t at = 14;
    while ((type == 0x8100 || type == 0x88a8) && at + 4 <= n) {
        type = be16(d + at + 2);
        at += 4;
    }
    unsigned proto;
    uint32_t l4, l4_end;
    if (type == 0x0800) {
        if (at + 20 > n)
            goto bad;
        uint32_t hlen = (d[at] & 15) * 4u, total = be16(d + at + 2);
        if (d[at] >> 4 != 4 || hlen < 20 || total < hlen || at + total > n)
            goto bad;
        proto = d[at + 9];
        l4 = at + hlen;
        l4_end = at + total;
    } else if (type == 0x86dd) {
        if (at + 40 > n || d[at] >> 4 != 6)
            goto bad;
        l4_end = at + 40 + be16(d + at + 4);
        if (l4_end > n)
            goto bad;
        proto = d[at + 6];
        l4 = at + 40;
    } else {
        return CAPSULE_PASS;
    }
    by_protocol[proto]++;
    if (proto == 6) {
        if (l4 + 20 > l4_end)
            goto bad;
        uint32_t hlen = (d[l4 + 12] >> 4) * 4u;
        if (hlen < 20 || l4 + hlen > l4_end)
            goto bad;
        ports_sum += be16(d + l4) + be16(d + l4 + 2);
        for (uint32_t o = l4 + 20, o_end = l4 + hlen; o < o_end;) {
            unsigned kind = d[o];
            if (kind == 0)
                break;
            if (kind == 1) {
                o++;
                continue;
            }
            if (o + 2 > o_end || d[o + 1] < 2 || o + d[o + 1] > o_end)
                break;
            if (kind == 2 && d[o + 1] == 4)
                mss_sum += be16(d + o + 2);
            o += d[o + 1];
        }
    } else if (proto == 17) {
        if (l4 + 8 > l4_end)
            goto bad;
        ports_sum += be16(d + l4) + be16(d + l4 + 2);
    }
    return CAPSULE_PASS;
bad:
    malformed++;
    return CAPSULE_PASS;
}
