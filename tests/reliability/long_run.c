/* A run long enough to be interrupted: ROUNDS rounds (argv[1], default 8), each filling 1 MiB PASSES times
   (argv[2], default 1) with a linear congruential sequence, appending the last fill to result.bin and printing
   the round's number. The file's contents depend on ROUNDS and PASSES only, so a test can tell a whole result
   from a partial one. */
#include <stdio.h>
#include <stdlib.h>

static unsigned char block[1 << 20];

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 8;
    long passes = argc > 2 ? atol(argv[2]) : 1;
    unsigned h = 1;
    FILE *f = fopen("result.bin", "w");
    if (!f)
        return 1;
    for (long r = 0; r < rounds; r++) {
        for (long p = 0; p < passes; p++) {
            for (unsigned i = 0; i < sizeof block; i++) {
                h = h * 1103515245u + 12345u;
                block[i] = (unsigned char)(h >> 24);
            }
        }
        fwrite(block, 1, sizeof block, f);
        printf("round %ld\n", r);
        fflush(stdout);
    }
    return fclose(f) != 0;
}
