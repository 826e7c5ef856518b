/* Recursion without end, each frame holding FRAME bytes (argv[1]) of C stack: the run must end in a clean
   "call stack exhausted" trap whatever the depth it is reached at. Used by tests/reliability/test_exhaustion.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile long sink;

static long down(long depth, long frame) {
    char *buf = __builtin_alloca(frame);
    memset(buf, (int)depth, (size_t)frame);
    sink += buf[frame - 1];
    return down(depth + 1, frame) + buf[0];
}

int main(int argc, char **argv) {
    long frame = argc > 1 ? atol(argv[1]) : 16;
    printf("frame %ld\n", frame);
    fflush(stdout);
    return (int)down(0, frame);
}
