/* The native side of the differential test: a handler built with gcc, fed the frames the kernel got.
 *
 * stdin: the snap length (u32), then frames, each a u32 length and its bytes. stdout: the handler's own
 * output as it comes, a line "verdict N" after each frame, and, at the end, what the handler's report prints
 * (a function the handler defines, named by -DREPORT=...). */
#include <capsule_hook.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info);
void REPORT(void);

static int get(void *p, size_t n) { return fread(p, 1, n, stdin) == n; }

int main(void) {
    uint32_t snaplen, len;
    static uint8_t frame[CAPSULE_PACKET_MAX];
    if (!get(&snaplen, 4))
        return 2;
    for (uint64_t seq = 1; get(&len, 4); seq++) {
        if (len > sizeof frame || !get(frame, len))
            return 2;
        struct capsule_packet_info info = {.len = len, .captured = len < snaplen ? len : snaplen,
                                           .hook = CAPSULE_HOOK_XDP, .seq = seq};
        int verdict = on_packet(frame, len, &info);
        printf("verdict %d\n", verdict);
    }
    REPORT();
    return 0;
}
