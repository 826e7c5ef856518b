/* heap.h: the hook runtime's allocator, safe to use from every CPU at once (see heap.c).
 *
 * The layout is read by the host too (capsule/hooks/heap.py walks it to check the heap after concurrent
 * runs): keep them in step. */
#ifndef CAPSULE_HEAP_H
#define CAPSULE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#define HEAP_SMALL_BINS 64  /* exact sizes 16, 32, ... 1024 */
#define HEAP_BINS 96        /* then one bin per power of two */
#define HEAP_LOCK_BROKEN 0xffffffffu /* hook_abi.LOCK_BROKEN: a fiber died holding the lock */

/* chunk header flags (low bits of the size word) */
#define HEAP_INUSE 1u
#define HEAP_FOREIGN 2u /* memory between two of the heap's pieces that someone else grew: never free */

struct capsule_heap {
    uint32_t lock;              /*   0: 0 free, fiber + 1 while held, HEAP_LOCK_BROKEN */
    uint32_t locked;            /*   4: 1: operations take the lock (the shared heap), 0: one owner only */
    uint32_t start;             /*   8: the first chunk (0 before the first use) */
    uint32_t end;               /*  12: the end sentinel: a header of size 0, in use */
    uint32_t growable;          /*  16: 1: may grow linear memory when full */
    uint32_t map[3];            /*  20: bit b set: bins[b] is not empty */
    uint32_t bins[HEAP_BINS];   /*  32: doubly linked free lists */
    uint64_t allocs;            /* 416 */
    uint64_t frees;             /* 424 */
    uint64_t in_use;            /* 432: bytes of chunks in use, headers included */
    uint64_t failed;            /* 440: requests refused (full, or the lock broken) */
};

/* a region of memory as a heap of its own (no lock: for a single fiber), and the operations on any heap */
void heap_init(struct capsule_heap *h, uint32_t base, uint32_t limit, int locked, int growable);
void *heap_alloc(struct capsule_heap *h, size_t n);
void *heap_alloc_aligned(struct capsule_heap *h, size_t align, size_t n);
void heap_free(struct capsule_heap *h, void *p);
void *heap_realloc(struct capsule_heap *h, void *p, size_t n);
size_t heap_usable(const void *p);

/* the shared heap behind malloc/free */
extern struct capsule_heap capsule_heap;

#endif
