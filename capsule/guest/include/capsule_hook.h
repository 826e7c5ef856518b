/* capsule_hook.h: a packet handler that capsule runs on an XDP or tc hook, on every CPU at once.
 *
 *     #include <capsule_hook.h>
 *
 *     CAPSULE_HANDLER int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
 *         return len < 14 ? CAPSULE_DROP : CAPSULE_PASS;
 *     }
 *
 * `capsule build --hook xdp handler.c` (or `capsule attach xdp handler.c ...`) builds it. The handler gets a
 * copy of the packet's first info->captured bytes (the snap length the host chose, at most
 * CAPSULE_PACKET_MAX); set info->changed to have the kernel copy the buffer back into the packet. It returns
 * a verdict; anything else, a trap, capsule_exit, or running out of the per-packet budget give the packet
 * the host's default verdict (PASS unless told otherwise), and the next packet runs normally.
 *
 * Each CPU runs the handler on a fiber of its own (info->cpu), at the same time as the others: globals and
 * the heap are shared, so counters that several CPUs change need <stdatomic.h>. malloc/free are safe from
 * every CPU (one heap behind a lock); the heap is prepared before the hook is attached and never grows
 * while it is (malloc returns NULL when it is full). printf/puts/putchar/fprintf(stdout|stderr) go to the
 * host through a ring buffer, one record per call (lines stay whole), in order per CPU; when the ring is
 * full the output is dropped and counted, never waited for.
 *
 * An optional CAPSULE_INIT function runs once, on the host's fiber, before the hook is attached.
 *
 * Built natively (gcc, no __wasm__), the same source is an ordinary C file: CAPSULE_HANDLER and CAPSULE_INIT
 * mark nothing, and a test harness calls the handler itself; this is how capsule checks a handler against
 * its native build. The numbers below are mirrored by capsule/compiler/hook_abi.py.
 */
#ifndef CAPSULE_HOOK_H
#define CAPSULE_HOOK_H

#include <stdint.h>

enum capsule_verdict {
    CAPSULE_DEFAULT = 0, /* whatever the host chose for packets a handler does not decide (PASS unless told) */
    CAPSULE_PASS = 1, /* let the packet through (XDP_PASS, TC_ACT_OK) */
    CAPSULE_DROP = 2, /* drop it (XDP_DROP, TC_ACT_SHOT) */
    CAPSULE_TX = 3,   /* XDP only: send it back out of the interface it came in on (XDP_TX) */
};

enum capsule_hook_kind { CAPSULE_HOOK_XDP = 1, CAPSULE_HOOK_TC = 2 };

#define CAPSULE_PACKET_MAX 16384

struct capsule_packet_info {
    uint32_t len;      /* the packet's length */
    uint32_t captured; /* bytes in the buffer the handler got: min(len, snap length, linear part) */
    uint32_t ifindex;  /* the interface it came in on */
    uint32_t queue;    /* its receive queue */
    uint32_t cpu;      /* the CPU running the handler, which is also its fiber */
    uint32_t hook;     /* enum capsule_hook_kind */
    uint64_t seq;      /* packets this CPU's fiber has seen, this one included */
    uint32_t changed;  /* set by the handler: copy the buffer back into the packet */
    uint32_t protocol; /* tc: the skb's protocol (network byte order, e.g. 0x0008 for IPv4); XDP: 0 */
};

#ifdef __wasm__
_Static_assert(sizeof(struct capsule_packet_info) == 40, "capsule_packet_info layout (hook_abi.INFO_*)");
#define CAPSULE_HANDLER __attribute__((export_name("capsule_packet"), used))
#define CAPSULE_INIT __attribute__((export_name("capsule_init"), used))
/* The fiber (0, 1, ... one per CPU; the host's calls run on the last one). */
__attribute__((import_module("capsule"), import_name("fiber"))) int32_t capsule_fiber(void);
#else
#define CAPSULE_HANDLER
#define CAPSULE_INIT
#endif

#endif
