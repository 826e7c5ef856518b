/* Long loops: an LCG walk whose closed form clang cannot find, over 10^9 iterations in the long test. */
typedef unsigned long long u64;

u64 spin(u64 n, u64 seed) {
    u64 x = seed;
    for (u64 i = 0; i < n; i++) x = x * 6364136223846793005ull + (1442695040888963407ull ^ i);
    return x;
}

/* nested loops with memory traffic */
static unsigned grid[64 * 64];
unsigned nested(int n, unsigned seed) {
    for (int i = 0; i < 64 * 64; i++) grid[i] = seed = seed * 1103515245u + 12345u;
    unsigned acc = 0;
    for (int r = 0; r < n; r++)
        for (int i = 1; i < 63; i++)
            for (int j = 1; j < 63; j++) {
                unsigned v = grid[i * 64 + j - 1] + grid[i * 64 + j + 1] + grid[(i - 1) * 64 + j] + grid[(i + 1) * 64 + j];
                grid[i * 64 + j] = v >> 2;
                acc += v;
            }
    return acc;
}
