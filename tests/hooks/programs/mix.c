/* Counts and prints the test traffic of tests/hooks/test_live.py by kind, drops UDP to port 9999, and
 * ignores (passes, uncounted) everything else the namespaces send by themselves (ARP, IPv6 neighbour and
 * multicast chatter). */
#include <capsule_hook.h>
#include <stdatomic.h>
#include <stdio.h>

#define ETH_TEST 0x88b5 /* IEEE local experimental: the malformed short frames */

enum { UDP4, DROP4, SYN4, PING4, UDP6, SHORT, JUMBO, KINDS };
_Atomic uint64_t counts[KINDS];
_Atomic uint64_t seen;
static const char *const names[KINDS] = {"udp4", "drop4", "syn4", "ping4", "udp6", "short", "jumbo"};

static unsigned u16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

static int kind_of(const uint8_t *p, uint32_t n, uint32_t len) {
    if (n < 14)
        return -1;
    unsigned type = u16(p + 12);
    if (type == ETH_TEST)
        return len < 60 ? SHORT : JUMBO;
    if (type == 0x0800 && n >= 14 + 20) {
        unsigned ihl = (p[14] & 15) * 4u, proto = p[23];
        const uint8_t *l4 = p + 14 + ihl;
        if (n < 14 + ihl + 8)
            return -1;
        if (proto == 17 && u16(l4 + 2) == 5000)
            return len > 8000 ? JUMBO : UDP4;
        if (proto == 17 && u16(l4 + 2) == 9999)
            return DROP4;
        if (proto == 6 && (l4[13] & 0x12) == 0x02)
            return SYN4;
        if (proto == 1 && l4[0] == 8)
            return PING4;
    }
    if (type == 0x86dd && n >= 14 + 40 + 8 && p[20] == 17 && u16(p + 14 + 40 + 2) == 5000)
        return UDP6;
    return -1;
}

CAPSULE_HANDLER int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
    seen++;
    int k = kind_of(pkt, info->captured, len);
    if (k < 0)
        return CAPSULE_PASS;
    counts[k]++;
    printf("%s %u\n", names[k], len);
    return k == DROP4 ? CAPSULE_DROP : CAPSULE_PASS;
}
