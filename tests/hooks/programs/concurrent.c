/* Two CPUs at once on shared memory: an atomic counter that must not lose an update, a plain one that may,
 * and a malloc and a free on every packet, with blocks handed from CPU to CPU through shared slots (a block
 * one CPU allocated is often freed by the other). */
#include <capsule_hook.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 64
_Atomic uint64_t total;
_Atomic uint64_t by_cpu[8];
uint64_t unlocked; /* plain ++ from both CPUs: updates may be lost */
_Atomic uint64_t failed;
static void *_Atomic slots[SLOTS];

_Atomic uint64_t inflight, peak; /* handlers running right now; the most ever seen at once */
_Atomic uint64_t others; /* what the namespaces send by themselves (IPv6 chatter): not the test's */

CAPSULE_HANDLER int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
    if (info->captured < 20 || pkt[12] != 0x88 || pkt[13] != 0xb5) {
        others++;
        return CAPSULE_PASS;
    }
    atomic_fetch_add_explicit(&total, 1, memory_order_relaxed);
    uint64_t now = atomic_fetch_add(&inflight, 1) + 1, was = atomic_load(&peak);
    while (now > was && !atomic_compare_exchange_weak(&peak, &was, now))
        ;
    by_cpu[info->cpu & 7]++;
    unlocked++;
    uint32_t n = info->captured > 20 ? (uint32_t)pkt[16] << 4 | pkt[17] : len; /* a size from the payload */
    uint8_t *p = malloc(n + 1);
    if (!p) {
        failed++;
        atomic_fetch_sub(&inflight, 1);
        return CAPSULE_PASS;
    }
    memset(p, (int)(info->seq & 0xff), n + 1);
    void *old = atomic_exchange(&slots[pkt[18] % SLOTS], p);
    free(old);
    for (volatile int spin = 0; spin < 200; spin++) /* stay a while, so that the other CPU's handler overlaps */
        ;
    atomic_fetch_sub(&inflight, 1);
    return CAPSULE_PASS;
}
