/* A packet handler for test_kill_attach.py: one line for each packet, and 400 for a packet whose first payload
 * byte is 'F' (more than the ring buffer holds when a few come at once). */
#include <capsule_hook.h>
#include <stdatomic.h>
#include <stdio.h>

#define FLOOD_LINES 400

_Atomic uint64_t packets;

CAPSULE_HANDLER int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
    uint64_t n = atomic_fetch_add(&packets, 1) + 1;
    if (info->captured > 14 && pkt[14] == 'F') {
        for (int i = 0; i < FLOOD_LINES; i++)
            printf("packet %llu: flood line %d\n", (unsigned long long)n, i);
    } else {
        printf("packet %llu: %u bytes\n", (unsigned long long)n, len);
    }
    return CAPSULE_PASS;
}
