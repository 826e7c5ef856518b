/* standalone.c: what capsule's guest WASI runtime needs to stand alone, beside a program it was not linked with.
 *
 * A wasm32-wasi module built elsewhere (wasi-sdk, Rust, a hand-written one) imports wasi_snapshot_preview1
 * directly. capsule builds the runtime's own sources (../wasi/*.c) a second time without wasi-libc, links
 * them at an address just past the program's initial memory, and merges the two modules
 * (capsule/wasm/link.py): each WASI import of the program becomes a call to the runtime's function of the
 * same name. What wasi-libc gave the runtime in a capsule build is here instead:
 *
 *  - a small allocator (the memory file system, argument blobs and the host's capsule_alloc), whose heap
 *    starts at the runtime's __heap_base and grows with memory.grow like any other allocator in the module;
 *  - memcpy/memmove/memset (memory.copy/fill: the runtime is built with bulk memory), memcmp, strlen;
 *  - the program's view of memory.size and memory.grow. The runtime lives in the pages right after the
 *    program's initial memory, so the program must not take them for free heap: until it first grows
 *    memory, memory.size tells it only its own initial size; memory.grow returns where the new pages
 *    really are (past the runtime), which every allocator that takes memory.grow's result at its word
 *    (wasi-libc's sbrk and dlmalloc, Rust's dlmalloc, Zig's) handles as a new region;
 *  - proc_raise, the one WASI call the shared sources do not define (ENOSYS).
 */
#include <stddef.h>
#include <stdint.h>

#include "../wasi/runtime.h"

#define WASM_PAGE 65536u

/* -- the program's memory instructions --------------------------------------------------------------- */
extern char __global_base; /* where the runtime was linked: the end of the program's initial memory */
static uint32_t program_grew;

EXPORT("capsule_program_memory_size") uint32_t capsule_program_memory_size(void) {
    if (!program_grew)
        return (uint32_t)(uintptr_t)&__global_base / WASM_PAGE;
    return (uint32_t)__builtin_wasm_memory_size(0);
}

EXPORT("capsule_program_memory_grow") uint32_t capsule_program_memory_grow(uint32_t pages) {
    if (pages == 0)
        return capsule_program_memory_size();
    uint32_t old = (uint32_t)__builtin_wasm_memory_grow(0, pages);
    if (old != UINT32_MAX)
        program_grew = 1;
    return old;
}

/* -- the runtime's allocator -------------------------------------------------------------------------- */
/* Small blocks come in power-of-two classes (16 bytes .. 32 KiB, an 8-byte header included) carved from a
 * bump region and recycled through one free list per class; larger ones are whole runs of wasm pages from
 * memory.grow, recycled first-fit. Simple and predictable: the runtime holds few, mostly long-lived blocks
 * (file nodes and contents, names, argument blobs). */
#define MIN_SHIFT 4
#define MAX_SHIFT 15
#define HEADER 8u
#define BIG_CLASS 0xFFu

struct header {
    uint32_t cls;   /* size class (shift), or BIG_CLASS */
    uint32_t pages; /* for big blocks: the run's length in wasm pages */
};

struct free_block {
    struct free_block *next;
};

extern char __heap_base;
static uintptr_t bump, bump_end;
static struct free_block *free_small[MAX_SHIFT + 1];
static struct free_block *free_big; /* each big block's header precedes it, as when allocated */

static uintptr_t grow_pages(uint32_t pages) {
    uint32_t old = (uint32_t)__builtin_wasm_memory_grow(0, pages);
    return old == UINT32_MAX ? 0 : (uintptr_t)old * WASM_PAGE;
}

static void *alloc_big(size_t size) {
    size_t need = (size + HEADER + WASM_PAGE - 1) / WASM_PAGE;
    if (size > UINT32_MAX - 2 * WASM_PAGE)
        return NULL;
    for (struct free_block **link = &free_big; *link; link = &(*link)->next) {
        struct header *h = (struct header *)((uintptr_t)*link - HEADER);
        if (h->pages >= need) {
            void *p = *link;
            *link = (*link)->next;
            return p;
        }
    }
    uintptr_t run = grow_pages((uint32_t)need);
    if (!run)
        return NULL;
    struct header *h = (struct header *)run;
    h->cls = BIG_CLASS;
    h->pages = (uint32_t)need;
    return (void *)(run + HEADER);
}

static void *alloc_small(uint32_t shift) {
    struct free_block *b = free_small[shift];
    if (b) {
        free_small[shift] = b->next;
        return b;
    }
    uint32_t bytes = 1u << shift;
    if (!bump) {
        bump = ((uintptr_t)&__heap_base + 15) & ~(uintptr_t)15;
        bump_end = ((uintptr_t)&__heap_base + WASM_PAGE - 1) & ~(uintptr_t)(WASM_PAGE - 1);
    }
    if (bump_end - bump < bytes) {
        uintptr_t run = grow_pages(1);
        if (!run)
            return NULL;
        bump = run; /* what was left of the old region is given up: at most one block's worth */
        bump_end = run + WASM_PAGE;
    }
    struct header *h = (struct header *)bump;
    bump += bytes;
    h->cls = shift;
    h->pages = 0;
    return (uint8_t *)h + HEADER;
}

static size_t capacity(const void *p) {
    const struct header *h = (const struct header *)((uintptr_t)p - HEADER);
    return h->cls == BIG_CLASS ? (size_t)h->pages * WASM_PAGE - HEADER : ((size_t)1 << h->cls) - HEADER;
}

void *malloc(size_t size) {
    if (size > (1u << MAX_SHIFT) - HEADER)
        return alloc_big(size);
    uint32_t shift = MIN_SHIFT;
    while (((size_t)1 << shift) - HEADER < size)
        shift++;
    return alloc_small(shift);
}

void free(void *p) {
    if (!p)
        return;
    struct header *h = (struct header *)((uintptr_t)p - HEADER);
    struct free_block *b = p;
    if (h->cls == BIG_CLASS) {
        b->next = free_big;
        free_big = b;
    } else {
        b->next = free_small[h->cls];
        free_small[h->cls] = b;
    }
}

void *calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = malloc(n * size);
    if (p)
        __builtin_memset(p, 0, n * size);
    return p;
}

void *realloc(void *p, size_t size) {
    if (!p)
        return malloc(size);
    size_t cap = capacity(p);
    if (size <= cap)
        return p;
    void *q = malloc(size);
    if (q) {
        __builtin_memcpy(q, p, cap);
        free(p);
    }
    return q;
}

/* -- string.h (memory.copy and memory.fill do the bulk work) ------------------------------------------- */
void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    __builtin_memcpy(dst, src, n);
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    __builtin_memmove(dst, src, n);
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    __builtin_memset(dst, c, n);
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return x[i] - y[i];
    return 0;
}

size_t strlen(const char *s) {
    const char *p = s;
    while (*p)
        p++;
    return (size_t)(p - s);
}

/* -- the WASI call the shared sources leave out ------------------------------------------------------- */
int32_t WASI(proc_raise)(int32_t sig) {
    (void)sig;
    return __WASI_ERRNO_NOSYS;
}
