/* A bump allocator over memory.grow: allocations past the current memory grow it page by page; blocks are
 * filled and summed so that newly grown memory is really used. */
typedef unsigned long size_t;
extern unsigned char __heap_base;

static size_t top;

static void *alloc(size_t n) {
    if (!top) top = (size_t)&__heap_base;
    size_t at = (top + 15) & ~(size_t)15;
    size_t end = at + n;
    size_t have = __builtin_wasm_memory_size(0) * 65536ul;
    if (end > have) {
        size_t pages = (end - have + 65535) / 65536;
        if (__builtin_wasm_memory_grow(0, pages) == (size_t)-1) return 0;
    }
    top = end;
    return (void *)at;
}

/* allocate n bytes, fill them from the seed, return a checksum (or -1 when memory.grow refused) */
long long take(int n, unsigned seed) {
    unsigned char *p = alloc((size_t)n);
    if (!p) return -1;
    long long h = 0;
    for (int i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; p[i] = (unsigned char)(seed >> 16); }
    for (int i = 0; i < n; i += 97) h = h * 131 + p[i];
    return h + (long long)(size_t)p;
}

int pages(void) { return (int)__builtin_wasm_memory_size(0); }
int grow(int n) { return (int)__builtin_wasm_memory_grow(0, (size_t)n); }
/* sum of the bytes at every 4 KiB step from a to b: reads across grown pages */
long long sweep(unsigned a, unsigned b) {
    long long s = 0;
    for (unsigned x = a; x < b; x += 4096) s = s * 3 + *(volatile unsigned char *)(size_t)x;
    return s;
}
