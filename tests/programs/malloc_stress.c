/* malloc/calloc/realloc/free with random sizes and a random free order; every block keeps its contents. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t state = 12345;
static uint32_t rnd(void) {
    state = state * 1103515245u + 12345u;
    return state >> 8;
}

#define N 2000

int main(void) {
    static unsigned char *blocks[N];
    static size_t sizes[N];
    uint64_t checksum = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) {
            if (blocks[i] && rnd() % 3 == 0) {
                for (size_t k = 0; k < sizes[i]; k++)
                    if (blocks[i][k] != (unsigned char)(i + k)) {
                        printf("corrupt block %d at %zu\n", i, k);
                        return 1;
                    }
                free(blocks[i]);
                blocks[i] = NULL;
            }
            if (!blocks[i]) {
                size_t sz = rnd() % 8 == 0 ? rnd() % 65536 : rnd() % 256;
                unsigned char *p = rnd() % 4 == 0 ? calloc(sz ? sz : 1, 1) : malloc(sz ? sz : 1);
                if (!p) {
                    printf("out of memory\n");
                    return 1;
                }
                for (size_t k = 0; k < sz; k++)
                    p[k] = (unsigned char)(i + k);
                blocks[i] = p;
                sizes[i] = sz;
            } else if (rnd() % 5 == 0) {
                size_t sz = rnd() % 4096;
                unsigned char *p = realloc(blocks[i], sz ? sz : 1);
                if (!p)
                    return 1;
                for (size_t k = sizes[i]; k < sz; k++)
                    p[k] = (unsigned char)(i + k);
                blocks[i] = p;
                sizes[i] = sz;
            }
        }
        uint64_t sum = 0;
        for (int i = 0; i < N; i++)
            for (size_t k = 0; k < sizes[i]; k += 7)
                sum += blocks[i][k];
        checksum = checksum * 31 + sum;
        printf("round %d sum %llu\n", round, (unsigned long long)sum);
    }
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    void *big = malloc(8 << 20);
    printf("big %s\n", big ? "ok" : "null");
    free(big);
    printf("checksum %llu\n", (unsigned long long)checksum);
    return 0;
}
