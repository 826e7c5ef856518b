/* A native stress of capsule's hook heap (capsule/guest/hook/heap.c), built with gcc: random malloc, free,
 * realloc and aligned allocations over a region in the low 4 GiB (the allocator's addresses are 32 bits),
 * every block filled with a pattern that is checked before it is freed or moved. At the end it writes the
 * region and the heap's state to stdout for the host's walker (capsule/hooks/heap.py):
 *     u32 region address, u32 region size, u32 state address, region bytes, state bytes.
 * Exit status 1 (with a message on stderr) when a block's contents changed under it. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "heap.h"

#define LIVE 2048
#define REGION (8u << 20)

static struct capsule_heap heap;
static struct { uint8_t *p; size_t n; uint8_t fill; } live[LIVE];
static uint64_t rng = 88172645463325252ull;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static size_t pick_size(void) {
    uint64_t r = next() % 100;
    if (r < 60) return next() % 64;
    if (r < 90) return next() % 1100;
    if (r < 99) return next() % 20000;
    return next() % 300000;
}

static void verify(int k) {
    for (size_t i = 0; i < live[k].n; i++)
        if (live[k].p[i] != (uint8_t)(live[k].fill + i)) {
            fprintf(stderr, "block %d (%p, %zu bytes) changed at byte %zu\n", k, (void *)live[k].p, live[k].n, i);
            exit(1);
        }
}

static void fill(int k) {
    for (size_t i = 0; i < live[k].n; i++)
        live[k].p[i] = (uint8_t)(live[k].fill + i);
}

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 100000;
    rng ^= argc > 2 ? (uint64_t)atol(argv[2]) * 2654435761u : 0;
    uint8_t *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (region == MAP_FAILED || (uintptr_t)region + REGION > 0xffffffffu) {
        fprintf(stderr, "no memory in the low 4 GiB\n");
        return 2;
    }
    uint32_t base = (uint32_t)(uintptr_t)region + 3; /* unaligned on purpose */
    heap_init(&heap, base, (uint32_t)(uintptr_t)region + REGION - 5, 0, 0);
    long failed = 0;
    for (long op = 0; op < ops; op++) {
        int k = (int)(next() % LIVE);
        uint64_t what = next() % 10;
        if (live[k].p && what < 4) {
            verify(k);
            heap_free(&heap, live[k].p);
            live[k].p = NULL;
        } else if (live[k].p && what < 7) {
            verify(k);
            size_t n = pick_size();
            uint8_t *q = heap_realloc(&heap, live[k].p, n);
            if (!q) { failed++; continue; }
            size_t keep = n < live[k].n ? n : live[k].n;
            live[k].p = q;
            live[k].n = keep;
            verify(k);
            live[k].n = n;
            fill(k);
        } else if (!live[k].p) {
            size_t n = pick_size();
            size_t align = what == 9 ? (size_t)16 << (next() % 9) : 0;
            uint8_t *p = align ? heap_alloc_aligned(&heap, align, n) : heap_alloc(&heap, n);
            if (!p) { failed++; continue; }
            if (((uintptr_t)p & 15) || (align && ((uintptr_t)p & (align - 1)))) {
                fprintf(stderr, "misaligned block %p (asked %zu)\n", (void *)p, align);
                return 1;
            }
            if (heap_usable(p) < n) {
                fprintf(stderr, "block %p has %zu usable bytes, asked %zu\n", (void *)p, heap_usable(p), n);
                return 1;
            }
            live[k].p = p;
            live[k].n = n;
            live[k].fill = (uint8_t)next();
            fill(k);
        }
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k].p) verify(k);
    fprintf(stderr, "ops %ld, failed %ld\n", ops, failed);
    uint32_t hdr[3] = {(uint32_t)(uintptr_t)region, REGION, (uint32_t)(uintptr_t)&heap};
    if ((uintptr_t)&heap > 0xffffffffu) { /* the state is read through a copy placed after the region */
        hdr[2] = 0;
    }
    fwrite(hdr, sizeof hdr, 1, stdout);
    fwrite(region, REGION, 1, stdout);
    fwrite(&heap, sizeof heap, 1, stdout);
    return 0;
}
