// Socket filter in the classic style: legacy BPF_LD | BPF_ABS / BPF_IND packet loads (through LLVM's
// llvm.bpf.load.* intrinsics) on an Ethernet frame, plus __sk_buff field reads. Accepts IPv4 TCP/UDP whose
// destination port is below 1024, truncating to 96 bytes.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

unsigned long long load_byte(void *skb, unsigned long long off) asm("llvm.bpf.load.byte");
unsigned long long load_half(void *skb, unsigned long long off) asm("llvm.bpf.load.half");
unsigned long long load_word(void *skb, unsigned long long off) asm("llvm.bpf.load.word");

SEC("socket")
int socket_ldabs(struct __sk_buff *skb)
{
    if (skb->len < ETH_HLEN + 20)
        return 0;
    if (load_half(skb, 12) != ETH_P_IP)
        return 0;
    __u64 proto = load_byte(skb, ETH_HLEN + 9);
    if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
        return 0;
    __u64 ihl = (load_byte(skb, ETH_HLEN) & 0xf) * 4;
    if (ihl < 20)
        return 0;
    __u64 ports = load_word(skb, ETH_HLEN + ihl);
    if ((ports & 0xffff) >= 1024)
        return 0;
    return skb->len < 96 ? skb->len : 96;
}

char LICENSE[] SEC("license") = "GPL";
