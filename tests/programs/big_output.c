/* Writes argv[1] megabytes of numbered lines (a deterministic stream the test checks by hash). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long long total = (argc > 1 ? atoll(argv[1]) : 1) * 1000000LL;
    static char line[128];
    long long written = 0;
    unsigned long n = 0;
    while (written < total) {
        int len = snprintf(line, sizeof line, "%010lu abcdefghijklmnopqrstuvwxyz0123456789\n", n++);
        if (written + len > total)
            len = (int)(total - written);
        fwrite(line, 1, (size_t)len, stdout);
        written += len;
    }
    fprintf(stderr, "wrote %lld\n", written);
    return 0;
}
