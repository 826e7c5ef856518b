/* heap.c: a boundary-tag allocator with segregated free lists, behind a spin lock on guest atomics.
 *
 * Written for capsule's hooks, where several CPUs run guest code at once over one heap. Chunks tile the
 * heap from `start` to the end sentinel; each has an 8-byte header at an address that is 8 mod 16, so
 * payloads are 16-byte aligned:
 *
 *     +0  u32 prev   size of the chunk before (0 for the first)
 *     +4  u32 head   size (a multiple of 16, headers included) | HEAP_INUSE | HEAP_FOREIGN
 *     +8  payload;   a free chunk keeps its list links here: u32 next, u32 prev
 *
 * Free chunks are never adjacent (free coalesces both ways), and each sits in the bin of its size: exact
 * sizes up to 1024 bytes, one bin per power of two above (first fit inside a bin, a bitmap to find the next
 * non-empty one), so every operation does a small, bounded amount of work.
 *
 * The lock holds the owner (fiber + 1). A fiber abandoned while holding it (a packet that ran out of budget
 * inside malloc) may have left the lists half changed: the hook entry then sets the lock to
 * HEAP_LOCK_BROKEN, and from then on every request fails cleanly (NULL) instead of using a damaged heap.
 * Growing takes linear memory with memory.grow, which fails while a hook is attached (the host commits the
 * heap before attaching), so malloc returns NULL when the heap is full.
 */
#include "heap.h"

#include <string.h>

#include <capsule_hook.h>

#define HDR 8u
#define MIN_CHUNK 16u
#define WASM_PAGE 65536u

#define PREV(c) (((uint32_t *)(uintptr_t)(c))[0])
#define HEAD(c) (((uint32_t *)(uintptr_t)(c))[1])
#define LNEXT(c) (((uint32_t *)(uintptr_t)(c))[2])
#define LPREV(c) (((uint32_t *)(uintptr_t)(c))[3])
#define SIZE(c) (HEAD(c) & ~15u)
#define FREE(c) (!(HEAD(c) & HEAP_INUSE))

struct capsule_heap capsule_heap = {.locked = 1, .growable = 1};

static unsigned bin_of(uint32_t size) {
    if (size <= 1024)
        return size / 16 - 1;
    unsigned b = HEAP_SMALL_BINS + (31 - (unsigned)__builtin_clz(size)) - 10;
    return b < HEAP_BINS ? b : HEAP_BINS - 1;
}

static void bin_insert(struct capsule_heap *h, uint32_t c) {
    unsigned b = bin_of(SIZE(c));
    uint32_t first = h->bins[b];
    LNEXT(c) = first;
    LPREV(c) = 0;
    if (first)
        LPREV(first) = c;
    h->bins[b] = c;
    h->map[b / 32] |= 1u << (b % 32);
}

static void bin_remove(struct capsule_heap *h, uint32_t c) {
    unsigned b = bin_of(SIZE(c));
    uint32_t next = LNEXT(c), prev = LPREV(c);
    if (prev)
        LNEXT(prev) = next;
    else
        h->bins[b] = next;
    if (next)
        LPREV(next) = prev;
    if (!h->bins[b])
        h->map[b / 32] &= ~(1u << (b % 32));
}

/* the chunk [c, c + size) becomes free (it is not in a list, its neighbours are in use) */
static void make_free(struct capsule_heap *h, uint32_t c, uint32_t size) {
    HEAD(c) = size;
    PREV(c + size) = size;
    bin_insert(h, c);
}

void heap_init(struct capsule_heap *h, uint32_t base, uint32_t limit, int locked, int growable) {
    memset(h, 0, sizeof *h);
    h->locked = (uint32_t)locked;
    h->growable = (uint32_t)growable;
    uint32_t start = ((base + 15) & ~15u) + HDR; /* 8 mod 16 */
    uint32_t end = (limit & ~15u) - HDR;
    if (end < start + MIN_CHUNK) { /* no room for one chunk: an empty heap */
        h->start = h->end = 0;
        return;
    }
    h->start = start;
    h->end = end;
    PREV(start) = 0;
    HEAD(end) = HEAP_INUSE;
    make_free(h, start, end - start);
}

static int lock(struct capsule_heap *h) {
    if (!h->locked)
        return 1;
#ifdef __wasm__
    uint32_t me = (uint32_t)capsule_fiber() + 1;
#else
    uint32_t me = 1; /* a native build (capsule's tests of this allocator) */
#endif
    for (;;) {
        uint32_t expected = 0;
        if (__atomic_compare_exchange_n(&h->lock, &expected, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 1;
        if (expected == HEAP_LOCK_BROKEN)
            return 0;
    }
}

static void unlock(struct capsule_heap *h) {
    if (h->locked)
        __atomic_store_n(&h->lock, 0, __ATOMIC_RELEASE);
}

/* the shared heap starts on first use, over the memory above the program's data and stack */
static void ensure(struct capsule_heap *h) {
#ifdef __wasm__
    extern unsigned char __heap_base;
    if (h->start || h != &capsule_heap)
        return;
    heap_init(h, (uint32_t)(uintptr_t)&__heap_base, (uint32_t)__builtin_wasm_memory_size(0) * WASM_PAGE, 1, 1);
#else
    (void)h;
#endif
}

/* take `bytes` more linear memory at the end of the heap: the old sentinel becomes a free chunk (or, when
 * someone else grew memory since, an in-use FOREIGN chunk over their part, then a free chunk over ours) */
static int grow(struct capsule_heap *h, uint32_t bytes) {
    if (!h->growable)
        return 0;
#ifndef __wasm__
    (void)bytes;
    return 0;
#else
    uint32_t pages = (bytes + 2 * MIN_CHUNK + WASM_PAGE - 1) / WASM_PAGE;
    size_t old = __builtin_wasm_memory_grow(0, pages);
    if (old == (size_t)-1)
        return 0;
    uint32_t lo = (uint32_t)old * WASM_PAGE, hi = lo + pages * WASM_PAGE;
    if (!h->end) { /* the heap had no room at all so far: it starts here */
        h->start = lo + HDR;
        h->end = hi - HDR;
        PREV(h->start) = 0;
        HEAD(h->end) = HEAP_INUSE;
        make_free(h, h->start, h->end - h->start);
        return 1;
    }
    uint32_t c = h->end;
    if (lo != c + HDR) { /* not contiguous: step over the foreign memory */
        uint32_t gap = lo - HDR - c;
        HEAD(c) = gap | HEAP_INUSE | HEAP_FOREIGN;
        PREV(c + gap) = gap;
        h->in_use += gap;
        c += gap;
    }
    uint32_t end = hi - HDR;
    HEAD(end) = HEAP_INUSE;
    uint32_t size = end - c;
    if (c != h->start && !(HEAD(c) & HEAP_FOREIGN) && PREV(c) && FREE(c - PREV(c))) { /* coalesce backwards */
        uint32_t p = c - PREV(c);
        bin_remove(h, p);
        size += SIZE(p);
        c = p;
    }
    h->end = end;
    make_free(h, c, size);
    return 1;
#endif
}

/* a free chunk of at least `size` bytes, taken out of its list (0 if none) */
static uint32_t take(struct capsule_heap *h, uint32_t size) {
    unsigned b = bin_of(size);
    if (b >= HEAP_SMALL_BINS) { /* first fit inside the bin of this power of two */
        for (uint32_t c = h->bins[b]; c; c = LNEXT(c))
            if (SIZE(c) >= size) {
                bin_remove(h, c);
                return c;
            }
        b++;
    } else if (h->bins[b]) {
        uint32_t c = h->bins[b];
        bin_remove(h, c);
        return c;
    }
    for (unsigned w = b / 32; w < 3 && b < HEAP_BINS; w++, b = w * 32) {
        uint32_t bits = h->map[w] & (~0u << (b % 32));
        if (bits) {
            uint32_t c = h->bins[w * 32 + (unsigned)__builtin_ctz(bits)];
            bin_remove(h, c);
            return c;
        }
    }
    return 0;
}

/* use `size` bytes of free chunk c (out of its list); the rest, if it is a chunk's worth, stays free */
static void *carve(struct capsule_heap *h, uint32_t c, uint32_t size) {
    uint32_t have = SIZE(c);
    if (have - size >= 2 * MIN_CHUNK) {
        make_free(h, c + size, have - size);
        have = size;
    }
    HEAD(c) = have | HEAP_INUSE;
    PREV(c + have) = have;
    h->allocs++;
    h->in_use += have;
    return (void *)(uintptr_t)(c + HDR);
}

static uint32_t chunk_size(size_t n) {
    if (n > 0x7fff0000u)
        return 0;
    uint32_t size = ((uint32_t)n + HDR + 15) & ~15u;
    return size < MIN_CHUNK ? MIN_CHUNK : size;
}

void *heap_alloc(struct capsule_heap *h, size_t n) {
    uint32_t size = chunk_size(n);
    if (!size)
        return NULL;
    if (!lock(h)) {
        h->failed++;
        return NULL;
    }
    ensure(h);
    uint32_t c = h->start ? take(h, size) : 0;
    if (!c && grow(h, size))
        c = take(h, size);
    void *p = c ? carve(h, c, size) : NULL;
    if (!p)
        h->failed++;
    unlock(h);
    return p;
}

void *heap_alloc_aligned(struct capsule_heap *h, size_t align, size_t n) {
    if (align <= 16)
        return heap_alloc(h, n);
    if (align & (align - 1) || align > (1u << 24))
        return NULL;
    uint32_t size = chunk_size(n);
    uint32_t want = chunk_size(n + align + 2 * MIN_CHUNK);
    if (!size || !want)
        return NULL;
    if (!lock(h)) {
        h->failed++;
        return NULL;
    }
    ensure(h);
    uint32_t c = h->start ? take(h, want) : 0;
    if (!c && grow(h, want))
        c = take(h, want);
    void *p = NULL;
    if (c) {
        uint32_t payload = (c + HDR + 2 * MIN_CHUNK + (uint32_t)align - 1) & ~((uint32_t)align - 1);
        uint32_t front = payload - HDR - c; /* at least 2 * MIN_CHUNK: a free chunk of its own */
        uint32_t rest = SIZE(c) - front;
        make_free(h, c, front);
        HEAD(c + front) = rest;
        PREV(c + front) = front;
        p = carve(h, c + front, size);
    } else {
        h->failed++;
    }
    unlock(h);
    return p;
}

void heap_free(struct capsule_heap *h, void *p) {
    if (!p)
        return;
    uint32_t c = (uint32_t)(uintptr_t)p - HDR;
    /* a pointer this heap never gave out, or a second free: trap (outside the lock, which stays usable) */
    if (c < h->start || c >= h->end || (c & 15) != HDR || !(HEAD(c) & HEAP_INUSE) || (HEAD(c) & HEAP_FOREIGN))
        __builtin_trap();
    if (!lock(h)) {
        h->failed++;
        return;
    }
    uint32_t size = SIZE(c);
    h->frees++;
    h->in_use -= size;
    uint32_t next = c + size;
    if (FREE(next)) {
        bin_remove(h, next);
        size += SIZE(next);
    }
    if (PREV(c) && FREE(c - PREV(c))) {
        uint32_t prev = c - PREV(c);
        bin_remove(h, prev);
        size += SIZE(prev);
        c = prev;
    }
    make_free(h, c, size);
    unlock(h);
}

size_t heap_usable(const void *p) {
    return p ? SIZE((uint32_t)(uintptr_t)p - HDR) - HDR : 0;
}

void *heap_realloc(struct capsule_heap *h, void *p, size_t n) {
    if (!p)
        return heap_alloc(h, n);
    uint32_t size = chunk_size(n);
    if (!size)
        return NULL;
    uint32_t c = (uint32_t)(uintptr_t)p - HDR;
    if (c < h->start || c >= h->end || (c & 15) != HDR || !(HEAD(c) & HEAP_INUSE) || (HEAD(c) & HEAP_FOREIGN))
        __builtin_trap();
    if (!lock(h)) {
        h->failed++;
        return NULL;
    }
    uint32_t old = SIZE(c), have = old, next = c + have;
    if (have < size && FREE(next) && have + SIZE(next) >= size) { /* grow into the free neighbour */
        bin_remove(h, next);
        have += SIZE(next);
    }
    if (have >= size) {
        uint32_t keep = have;
        if (have - size >= 2 * MIN_CHUNK) { /* give back the tail, merged with a free chunk after it */
            keep = size;
            uint32_t tail = c + size, tsize = have - size, after = tail + tsize;
            PREV(tail) = size;
            if (FREE(after)) {
                bin_remove(h, after);
                tsize += SIZE(after);
            }
            make_free(h, tail, tsize);
        } else {
            PREV(c + keep) = keep;
        }
        HEAD(c) = keep | HEAP_INUSE;
        h->in_use -= old;
        h->in_use += keep;
        unlock(h);
        return p;
    }
    unlock(h);
    void *q = heap_alloc(h, n);
    if (q) {
        memcpy(q, p, have - HDR);
        heap_free(h, p);
    }
    return q;
}
