/* hook_rt.c: what a program running on a hook needs beyond capsule's WASI runtime (linked with it, for
 * `capsule build --hook`).
 *
 * - capsule_hook_start(heap_bytes): the set-up the host runs once before attaching: the heap, grown to
 *   `heap_bytes` while the host can still back pages, the static constructors, unbuffered stdout.
 * - malloc and friends on the shared, locked heap (heap.c): wasi-libc's dlmalloc is not safe when two CPUs
 *   call it at once, so this runtime defines the whole family and dlmalloc is never linked.
 * - Output: standard output and error go to the hook's ring buffer (capsule_emit, at most OUT_MAX bytes a
 *   record). printf, vprintf, puts, putchar, fputs and fprintf to stdout/stderr format on the calling
 *   fiber's own C stack and write one record per call, so lines from several CPUs never mix and no FILE is
 *   shared; other stdio on stdout goes through wasi-libc's (unlocked) FILE, which only one CPU at a time may
 *   use.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../wasi/runtime.h"
#include "heap.h"

#define OUT_MAX 232 /* hook_abi.OUT_MAX */

__attribute__((import_module("capsule"), import_name("emit"))) int32_t capsule_emit(int32_t fd, const void *p,
                                                                                       int32_t n);

extern void __wasm_call_ctors(void);

/* the heap's lock word, which the host hands to the hook entry (hook_abi.LOCK_EXPORT): its address */
EXPORT("capsule_heap_lock") uint32_t *capsule_heap_lock(void) { return &capsule_heap.lock; }
EXPORT("capsule_heap") struct capsule_heap *capsule_heap_state(void) { return &capsule_heap; }

EXPORT("capsule_hook_start") int32_t capsule_hook_start(uint32_t heap_bytes) {
    static int started;
    if (started)
        return 0;
    started = 1;
    capsule_io()->in_eof = 1; /* nobody feeds standard input on a hook */
    void *probe = malloc(heap_bytes ? heap_bytes : 1); /* grows the heap while the host backs pages */
    int32_t ok = probe != NULL;
    free(probe);
    __wasm_call_ctors();
    setvbuf(stdout, NULL, _IONBF, 0);
    return ok ? 0 : -1;
}

/* -- output --------------------------------------------------------------------------------------------- */
void rt_hook_write(uint32_t fd, const uint8_t *p, size_t n) {
    while (n) {
        size_t k = n < OUT_MAX ? n : OUT_MAX;
        capsule_emit((int32_t)fd, p, (int32_t)k); /* a full ring drops the record (the kernel counts it) */
        p += k;
        n -= k;
    }
}

static int ring_vprintf(uint32_t fd, const char *fmt, va_list ap) {
    char buf[512];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n >= 0 && (size_t)n < sizeof buf) {
        rt_hook_write(fd, (const uint8_t *)buf, (size_t)n);
    } else if (n >= 0) {
        char *big = malloc((size_t)n + 1);
        if (big) {
            vsnprintf(big, (size_t)n + 1, fmt, again);
            rt_hook_write(fd, (const uint8_t *)big, (size_t)n);
            free(big);
        } else {
            rt_hook_write(fd, (const uint8_t *)buf, sizeof buf - 1);
        }
    }
    va_end(again);
    return n;
}

static int std_fd(FILE *f) { return f == stdout ? 1 : f == stderr ? 2 : 0; }

int vprintf(const char *fmt, va_list ap) { return ring_vprintf(1, fmt, ap); }

int printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = ring_vprintf(1, fmt, ap);
    va_end(ap);
    return n;
}

int fprintf(FILE *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int fd = std_fd(f);
    int n = fd ? ring_vprintf((uint32_t)fd, fmt, ap) : vfprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

/* s and a newline as one record when they fit one */
static void line(uint32_t fd, const char *s, int newline) {
    size_t n = strlen(s);
    if (newline && n < OUT_MAX) {
        char buf[OUT_MAX];
        memcpy(buf, s, n);
        buf[n] = '\n';
        rt_hook_write(fd, (const uint8_t *)buf, n + 1);
        return;
    }
    rt_hook_write(fd, (const uint8_t *)s, n);
    if (newline)
        rt_hook_write(fd, (const uint8_t *)"\n", 1);
}

int puts(const char *s) {
    line(1, s, 1);
    return 0;
}

int fputs(const char *s, FILE *f) {
    int fd = std_fd(f);
    if (!fd)
        return fwrite(s, 1, strlen(s), f) == strlen(s) ? 0 : EOF;
    line((uint32_t)fd, s, 0);
    return 0;
}

int putchar(int c) {
    uint8_t ch = (uint8_t)c;
    rt_hook_write(1, &ch, 1);
    return ch;
}

/* -- the heap --------------------------------------------------------------------------------------------- */
void *malloc(size_t n) { return heap_alloc(&capsule_heap, n); }
void free(void *p) { heap_free(&capsule_heap, p); }
void *realloc(void *p, size_t n) { return heap_realloc(&capsule_heap, p, n); }
size_t malloc_usable_size(void *p) { return heap_usable(p); }

void *calloc(size_t count, size_t size) {
    if (size && count > (size_t)-1 / size)
        return NULL;
    void *p = malloc(count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void *aligned_alloc(size_t align, size_t n) { return heap_alloc_aligned(&capsule_heap, align, n); }
void *memalign(size_t align, size_t n) { return heap_alloc_aligned(&capsule_heap, align, n); }

/* what the rest of wasi-libc calls dlmalloc by (atexit, locales): defined here, dlmalloc.o is never linked */
void *__libc_malloc(size_t n) { return malloc(n); }
void __libc_free(void *p) { free(p); }
void *__libc_calloc(size_t count, size_t size) { return calloc(count, size); }

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || align & (align - 1))
        return 22; /* EINVAL */
    void *p = heap_alloc_aligned(&capsule_heap, align, n);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}
