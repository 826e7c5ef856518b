// XDP: parse Ethernet/IPv4/UDP with bounds checks, count packets per IP protocol in an ARRAY map, sum UDP
// payload bytes with an atomic add, and drop one UDP port. Exercises 8/16/32-bit packet loads, byte-order
// conversion (be16/be32, bswap on v4) and map lookups.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 256);
    __type(key, __u32);
    __type(value, __u64);
} proto_packets SEC(".maps");

__u64 udp_payload_bytes;
__u32 last_saddr;
volatile const __u16 drop_port = 7;

SEC("xdp")
int xdp_parse(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;

    if ((void *)(eth + 1) > end)
        return XDP_ABORTED;
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->ihl < 5)
        return XDP_PASS;
    __u32 proto = ip->protocol;
    __u64 *count = bpf_map_lookup_elem(&proto_packets, &proto);
    if (count)
        __sync_fetch_and_add(count, 1);
    last_saddr = bpf_ntohl(ip->saddr);
    if (proto != IPPROTO_UDP)
        return XDP_PASS;
    struct udphdr *udp = (void *)ip + ip->ihl * 4;
    if ((void *)(udp + 1) > end)
        return XDP_PASS;
    __u16 len = bpf_ntohs(udp->len);
    if (len >= sizeof(*udp))
        __sync_fetch_and_add(&udp_payload_bytes, len - sizeof(*udp));
    return bpf_ntohs(udp->dest) == drop_port ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
