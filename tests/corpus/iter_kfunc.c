// Open-coded numeric iterators (bpf_for, i.e. the bpf_iter_num_new/next/destroy kfuncs declared __ksym in
// bpf_helpers.h) in an XDP program: kfunc calls with BTF ids resolved at load time, summing packet bytes.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 xdp_checksum;
__u32 xdp_seen;

SEC("xdp")
int iter_kfunc(struct xdp_md *ctx)
{
    __u8 *data = (void *)(long)ctx->data;
    __u8 *end = (void *)(long)ctx->data_end;
    __u64 sum = 0;
    int i;

    bpf_for(i, 0, 128) {
        if (data + i + 1 > end)
            break;
        sum = sum * 31 + data[i];
    }
    xdp_checksum = sum;
    xdp_seen++;
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
