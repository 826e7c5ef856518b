// The bundled demo: an XDP program that parses Ethernet/IPv4/UDP|TCP headers, keeps per-protocol counters in a
// map and a byte total in global data, and drops packets to one configured UDP port. Compiled with clang-19,
// loaded and run by capsule itself (no libbpf).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 256);
    __type(key, __u32);
    __type(value, __u64);
} proto_count SEC(".maps");

volatile const __u16 blocked_port = 9999;  /* .rodata: the loader may set it before load */
__u64 total_bytes;                           /* .bss */
__u32 last_checksum = 0xffffffff;            /* .data */

static __noinline __u32 fold(const __u8 *p, const __u8 *end)
{
    __u32 sum = 0;
    for (int i = 0; i < 64 && p + 1 <= end; i++, p++)
        sum = (sum << 5) + sum + *p;
    return sum;
}

SEC("xdp")
int packet_stats(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end)
        return XDP_PASS;
    __u32 proto = ip->protocol;
    __u64 *count = bpf_map_lookup_elem(&proto_count, &proto);
    if (count)
        __sync_fetch_and_add(count, 1);
    __sync_fetch_and_add(&total_bytes, (__u64)(end - data));
    last_checksum = fold(data, end);
    if (proto == IPPROTO_UDP) {
        struct udphdr *udp = (void *)ip + ip->ihl * 4;
        if ((void *)(udp + 1) > end)
            return XDP_PASS;
        if (udp->dest == bpf_htons(blocked_port))
            return XDP_DROP;
    }
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
