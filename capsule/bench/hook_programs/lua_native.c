/* lua_native.c: the Lua observer's glue (capsule/guest/hook/lua_observer.c, with Lua 5.4.8 and the hook
 * heap) built natively with gcc -m32 and fed one frame in a loop: the native figure beside the kernel's in
 * `capsule bench hooks`. 32-bit, because the glue keeps heap addresses in uint32_t as the guest does.
 *
 *     lua_native SCRIPT FRAME PACKETS    ->  prints "ns_per_packet N" (CPU time of the loop)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <capsule_hook.h>

char *capsule_lua_setup(uint32_t len, uint32_t heap_bytes);
int32_t capsule_lua_open(int32_t fiber);
int capsule_lua_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info);

void rt_hook_write(uint32_t fd, const uint8_t *p, size_t n) { fwrite(p, 1, n, fd == 2 ? stderr : stdout); }

static long slurp(const char *path, uint8_t *buf, long max) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    long n = (long)fread(buf, 1, (size_t)max, f);
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    static uint8_t text[1 << 20], frame[CAPSULE_PACKET_MAX];
    if (argc != 4)
        return 2;
    long tn = slurp(argv[1], text, sizeof text), fn = slurp(argv[2], frame, sizeof frame);
    long packets = atol(argv[3]);
    if (tn < 0 || fn < 0 || packets < 1)
        return 2;
    extern uint32_t lua_steps;
    if (getenv("LUA_STEPS"))
        lua_steps = (uint32_t)atol(getenv("LUA_STEPS"));
    memcpy(capsule_lua_setup((uint32_t)tn, 4u << 20), text, (size_t)tn);
    if (capsule_lua_open(0) != 0)
        return 1;
    struct capsule_packet_info info = {.len = (uint32_t)fn, .captured = (uint32_t)fn, .hook = CAPSULE_HOOK_XDP};
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    for (long k = 0; k < packets; k++) {
        info.seq = (uint64_t)k + 1;
        if (capsule_lua_packet(frame, (uint32_t)fn, &info) != CAPSULE_PASS)
            return 1;
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("ns_per_packet %.1f\n", ns / (double)packets);
    return 0;
}
