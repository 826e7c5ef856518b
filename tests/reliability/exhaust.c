/* Asking for more memory than the window holds: every request fails as C and wasm say, and the program goes on.
   Nothing is committed by the host for a request it refuses. Used by tests/reliability/test_exhaustion.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void *volatile kept; /* volatile, or the compiler folds the NULL tests away */

int main(void) {
    kept = malloc(0xFFFFFFF0u);
    printf("malloc 4 GiB: %s\n", kept ? "non-NULL" : "NULL");
    kept = calloc(1u << 16, 1u << 16);
    printf("calloc 64 Ki x 64 Ki: %s\n", kept ? "non-NULL" : "NULL");
    printf("memory.grow 65536 pages: %ld\n", (long)__builtin_wasm_memory_grow(0, 65536));
    printf("memory.grow 0x7fffffff pages: %ld\n", (long)__builtin_wasm_memory_grow(0, 0x7fffffff));
    kept = malloc(1 << 20);
    printf("then malloc 1 MiB: %s\n", kept ? "ok" : "NULL");
    return 0;
}
