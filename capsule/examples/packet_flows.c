/* packet_flows.c: per-flow statistics from every packet, in ordinary C, on an XDP or tc hook.
 *
 *     capsule attach xdp capsule/examples/packet_flows.c --dev eth1 --mode generic
 *
 * Parses Ethernet (with 802.1Q tags), IPv4 (with options), IPv6 (through its extension headers), TCP (every
 * option, however many), UDP and ICMP; keeps a hash table of flows (allocated with malloc, grown as it fills)
 * shared by every CPU; prints a line when a flow starts; drops what goes to `drop_port`. This is the kind of
 * program a clang-compiled BPF program cannot be: a table that grows, pointers to malloc'd nodes, a table of
 * parser functions called through pointers, loops whose trip counts the verifier cannot know.
 *
 * Built natively (gcc), the same file is what capsule's tests compare the kernel's answers with.
 */
#include <capsule_hook.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -- configuration and counters (the host reads and writes them by name while the hook runs) -------------- */
uint32_t drop_port = 9999;  /* drop TCP and UDP packets to this destination port (0: none) */
uint32_t print_flows = 1;   /* print a line for every new flow */
_Atomic uint64_t packets, malformed, dropped, flows;
_Atomic uint64_t by_protocol[256];

/* -- headers ------------------------------------------------------------------------------------------------ */
struct eth {
    uint8_t dst[6], src[6];
    uint16_t type;
} __attribute__((packed));

struct ipv4 {
    uint8_t ver_ihl, tos;
    uint16_t total_len, id, frag;
    uint8_t ttl, proto;
    uint16_t csum;
    uint8_t src[4], dst[4];
} __attribute__((packed));

struct ipv6 {
    uint32_t ver_class_flow;
    uint16_t payload_len;
    uint8_t next, hop_limit;
    uint8_t src[16], dst[16];
} __attribute__((packed));

struct tcp {
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint8_t off, flags;
    uint16_t window, csum, urgent;
} __attribute__((packed));

struct udp {
    uint16_t sport, dport, len, csum;
} __attribute__((packed));

static uint16_t be16(uint16_t v) { return (uint16_t)(v >> 8 | v << 8); }
static uint32_t be32(uint32_t v) { return v >> 24 | (v >> 8 & 0xff00) | (v << 8 & 0xff0000) | v << 24; }

/* -- flows -------------------------------------------------------------------------------------------------- */
struct flow_key {
    uint8_t family, proto; /* 4 or 6; the transport protocol */
    uint16_t sport, dport;
    uint8_t src[16], dst[16];
};

struct flow {
    struct flow_key key;
    struct flow *next;
    uint64_t packets, bytes;
    uint8_t tcp_flags;       /* every flag seen */
    uint8_t wscale, sack_ok; /* from a SYN's options */
    uint16_t mss;
    uint32_t tsval;          /* the last TCP timestamp */
};

/* what parsing one packet found */
struct parse {
    struct flow_key key;
    const uint8_t *l4;
    uint32_t l4_len;
    uint8_t tcp_flags, wscale, sack_ok, has_ports;
    uint16_t mss;
    uint32_t tsval;
};

static struct flow **table;
static uint32_t table_size; /* a power of two */
static atomic_flag table_lock = ATOMIC_FLAG_INIT;

static void lock(void) {
    while (atomic_flag_test_and_set_explicit(&table_lock, memory_order_acquire))
        ;
}
static void unlock(void) { atomic_flag_clear_explicit(&table_lock, memory_order_release); }

static uint32_t hash(const struct flow_key *k) {
    const uint8_t *p = (const uint8_t *)k;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* double the table when it holds twice as many flows as buckets (called with the lock held) */
static void grow(void) {
    uint32_t size = table_size ? table_size * 2 : 64;
    struct flow **fresh = calloc(size, sizeof *fresh);
    if (!fresh)
        return; /* keep the old table: longer chains, still correct */
    for (uint32_t b = 0; b < table_size; b++)
        for (struct flow *f = table[b], *next; f; f = next) {
            next = f->next;
            uint32_t at = hash(&f->key) & (size - 1);
            f->next = fresh[at];
            fresh[at] = f;
        }
    free(table);
    table = fresh;
    table_size = size;
}

static void format_addr(char *out, size_t n, const struct flow_key *k, const uint8_t *a) {
    if (k->family == 4)
        snprintf(out, n, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
    else
        snprintf(out, n, "%x:%x:%x:%x:%x:%x:%x:%x", a[0] << 8 | a[1], a[2] << 8 | a[3], a[4] << 8 | a[5],
                 a[6] << 8 | a[7], a[8] << 8 | a[9], a[10] << 8 | a[11], a[12] << 8 | a[13], a[14] << 8 | a[15]);
}

static const char *proto_name(uint8_t p) {
    return p == 6 ? "tcp" : p == 17 ? "udp" : p == 1 ? "icmp" : p == 58 ? "icmp6" : "ip";
}

static void describe(const struct flow *f, char *out, size_t n) {
    char src[48], dst[48];
    format_addr(src, sizeof src, &f->key, f->key.src);
    format_addr(dst, sizeof dst, &f->key, f->key.dst);
    snprintf(out, n, "%s %s:%u -> %s:%u", proto_name(f->key.proto), src, f->key.sport, dst, f->key.dport);
}

static void account(const struct parse *p, uint32_t len) {
    lock();
    if (flows >= 2 * (uint64_t)table_size)
        grow();
    struct flow *f = NULL;
    if (table_size) {
        uint32_t at = hash(&p->key) & (table_size - 1);
        for (f = table[at]; f && memcmp(&f->key, &p->key, sizeof p->key); f = f->next)
            ;
        if (!f && (f = calloc(1, sizeof *f))) {
            f->key = p->key;
            f->next = table[at];
            table[at] = f;
            flows++;
            if (print_flows) {
                char line[160];
                describe(f, line, sizeof line);
                if (p->mss)
                    printf("new flow %s mss %u wscale %u%s\n", line, p->mss, p->wscale, p->sack_ok ? " sack" : "");
                else
                    printf("new flow %s\n", line);
            }
        }
    }
    if (f) {
        f->packets++;
        f->bytes += len;
        f->tcp_flags |= p->tcp_flags;
        if (p->mss) {
            f->mss = p->mss;
            f->wscale = p->wscale;
            f->sack_ok = p->sack_ok;
        }
        if (p->tsval)
            f->tsval = p->tsval;
    }
    unlock();
}

/* -- transport parsers, by IP protocol number --------------------------------------------------------------- */
typedef int (*l4_parser)(struct parse *p);

/* TCP options: kind, length, data; as many as the header holds, in any order */
static void tcp_options(struct parse *p, const uint8_t *opt, uint32_t n) {
    uint32_t i = 0;
    while (i < n) {
        uint8_t kind = opt[i];
        if (kind == 0) /* end of options */
            break;
        if (kind == 1) { /* no-op */
            i++;
            continue;
        }
        if (i + 1 >= n || opt[i + 1] < 2 || i + opt[i + 1] > n)
            break; /* a damaged option ends the list */
        uint8_t len = opt[i + 1];
        if (kind == 2 && len == 4)
            p->mss = (uint16_t)(opt[i + 2] << 8 | opt[i + 3]);
        else if (kind == 3 && len == 3)
            p->wscale = opt[i + 2];
        else if (kind == 4 && len == 2)
            p->sack_ok = 1;
        else if (kind == 8 && len == 10)
            p->tsval = (uint32_t)opt[i + 2] << 24 | (uint32_t)opt[i + 3] << 16 | (uint32_t)opt[i + 4] << 8 | opt[i + 5];
        i += len;
    }
}

static int parse_tcp(struct parse *p) {
    if (p->l4_len < sizeof(struct tcp))
        return -1;
    const struct tcp *t = (const struct tcp *)p->l4;
    uint32_t hlen = (uint32_t)(t->off >> 4) * 4;
    if (hlen < sizeof *t || hlen > p->l4_len)
        return -1;
    p->key.sport = be16(t->sport);
    p->key.dport = be16(t->dport);
    p->has_ports = 1;
    p->tcp_flags = t->flags;
    tcp_options(p, p->l4 + sizeof *t, hlen - (uint32_t)sizeof *t);
    return 0;
}

static int parse_udp(struct parse *p) {
    if (p->l4_len < sizeof(struct udp))
        return -1;
    const struct udp *u = (const struct udp *)p->l4;
    p->key.sport = be16(u->sport);
    p->key.dport = be16(u->dport);
    p->has_ports = 1;
    return 0;
}

static int parse_icmp(struct parse *p) {
    if (p->l4_len < 4)
        return -1;
    p->key.sport = p->l4[0]; /* type and code stand in for ports */
    p->key.dport = p->l4[1];
    return 0;
}

static const l4_parser parsers[256] = {[1] = parse_icmp, [6] = parse_tcp, [17] = parse_udp, [58] = parse_icmp};

/* -- network layer ------------------------------------------------------------------------------------------ */
static int parse_ipv4(struct parse *p, const uint8_t *d, uint32_t n) {
    if (n < sizeof(struct ipv4))
        return -1;
    const struct ipv4 *ip = (const struct ipv4 *)d;
    uint32_t hlen = (uint32_t)(ip->ver_ihl & 15) * 4;
    if (ip->ver_ihl >> 4 != 4 || hlen < sizeof *ip || hlen > n)
        return -1;
    uint32_t total = be16(ip->total_len);
    if (total < hlen || total > n)
        return -1;
    p->key.family = 4;
    p->key.proto = ip->proto;
    memcpy(p->key.src, ip->src, 4);
    memcpy(p->key.dst, ip->dst, 4);
    p->l4 = d + hlen;
    p->l4_len = total - hlen;
    return 0;
}

/* IPv6 and its extension headers (hop-by-hop, routing, fragment, destination options): next header, length */
static int parse_ipv6(struct parse *p, const uint8_t *d, uint32_t n) {
    if (n < sizeof(struct ipv6))
        return -1;
    const struct ipv6 *ip = (const struct ipv6 *)d;
    if (be32(ip->ver_class_flow) >> 28 != 6)
        return -1;
    uint32_t end = (uint32_t)sizeof *ip + be16(ip->payload_len);
    if (end > n)
        return -1;
    uint8_t next = ip->next;
    uint32_t at = sizeof *ip;
    while (next == 0 || next == 43 || next == 44 || next == 60) {
        if (at + 8 > end)
            return -1;
        uint32_t len = next == 44 ? 8 : ((uint32_t)d[at + 1] + 1) * 8;
        next = d[at];
        at += len;
    }
    if (at > end)
        return -1;
    p->key.family = 6;
    p->key.proto = next;
    memcpy(p->key.src, ip->src, 16);
    memcpy(p->key.dst, ip->dst, 16);
    p->l4 = d + at;
    p->l4_len = end - at;
    return 0;
}

/* -- the handler -------------------------------------------------------------------------------------------- */
CAPSULE_HANDLER int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
    uint32_t n = info->captured;
    packets++;
    struct parse p;
    memset(&p, 0, sizeof p);
    if (n < sizeof(struct eth))
        goto bad;
    const struct eth *e = (const struct eth *)pkt;
    uint16_t type = be16(e->type);
    uint32_t at = sizeof *e;
    while ((type == 0x8100 || type == 0x88a8) && at + 4 <= n) { /* VLAN tags, stacked */
        type = (uint16_t)(pkt[at + 2] << 8 | pkt[at + 3]);
        at += 4;
    }
    int rc = type == 0x0800 ? parse_ipv4(&p, pkt + at, n - at) : type == 0x86dd ? parse_ipv6(&p, pkt + at, n - at) : 1;
    if (rc > 0)
        return CAPSULE_PASS; /* not IP: none of our business */
    if (rc < 0)
        goto bad;
    by_protocol[p.key.proto]++;
    l4_parser parse = parsers[p.key.proto];
    if (parse && parse(&p) < 0)
        goto bad;
    account(&p, len);
    if (drop_port && p.has_ports && p.key.dport == drop_port) {
        dropped++;
        return CAPSULE_DROP;
    }
    return CAPSULE_PASS;
bad:
    malformed++;
    return CAPSULE_PASS;
}

/* -- a report, on demand (the host calls it; a native build's harness too) ---------------------------------- */
static int by_key(const void *a, const void *b) {
    return memcmp(&(*(struct flow *const *)a)->key, &(*(struct flow *const *)b)->key, sizeof(struct flow_key));
}

#ifdef __wasm__
__attribute__((export_name("flows_report")))
#endif
void flows_report(void) {
    lock();
    struct flow **all = malloc((size_t)(flows ? flows : 1) * sizeof *all);
    uint64_t k = 0;
    for (uint32_t b = 0; all && b < table_size; b++)
        for (struct flow *f = table[b]; f; f = f->next)
            all[k++] = f;
    unlock();
    if (!all) {
        printf("no memory for the report\n");
        return;
    }
    qsort(all, (size_t)k, sizeof *all, by_key);
    printf("%llu packets, %llu malformed, %llu dropped, %llu flows\n", (unsigned long long)packets,
           (unsigned long long)malformed, (unsigned long long)dropped, (unsigned long long)k);
    for (uint64_t i = 0; i < k; i++) {
        char line[160];
        describe(all[i], line, sizeof line);
        printf("%s: %llu packets %llu bytes flags %#x mss %u tsval %u\n", line, (unsigned long long)all[i]->packets,
               (unsigned long long)all[i]->bytes, all[i]->tcp_flags, all[i]->mss, all[i]->tsval);
    }
    free(all);
}
