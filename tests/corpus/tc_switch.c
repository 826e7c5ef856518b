// TC classifier: direct packet access on __sk_buff, a switch over the IP protocol and DSCP classes, a HASH
// map of per-source counters, skb->mark and skb->priority writes, and a tail of 64-bit arithmetic.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct flow_stats {
    __u64 packets;
    __u64 bytes;
    __u32 last_len;
    __u16 last_proto;
    __u8 tos;
    __u8 class_id;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct flow_stats);
} flows SEC(".maps");

static __always_inline __u8 classify(__u8 proto, __u8 tos)
{
    switch (proto) {
    case IPPROTO_ICMP:
        return 1;
    case IPPROTO_TCP:
        return (tos >> 2) >= 46 ? 2 : 3;
    case IPPROTO_UDP:
        return 4;
    case IPPROTO_GRE:
        return 5;
    case IPPROTO_SCTP:
        return 6;
    default:
        return 7;
    }
}

SEC("tc")
int tc_switch(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data;
    void *end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);

    if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    __u32 saddr = ip->saddr;
    __u8 cls = classify(ip->protocol, ip->tos);
    struct flow_stats *st = bpf_map_lookup_elem(&flows, &saddr);
    if (!st) {
        struct flow_stats fresh = {.class_id = cls};
        bpf_map_update_elem(&flows, &saddr, &fresh, BPF_NOEXIST);
        st = bpf_map_lookup_elem(&flows, &saddr);
        if (!st)
            return TC_ACT_OK;
    }
    __sync_fetch_and_add(&st->packets, 1);
    __sync_fetch_and_add(&st->bytes, skb->len);
    st->last_len = skb->len;
    st->last_proto = ip->protocol;
    st->tos = ip->tos;
    skb->mark = cls;
    skb->priority = (__u32)(st->packets * 2654435761ULL >> 16) & 7;
    return cls == 5 ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
