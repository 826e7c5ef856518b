/* Exit statuses: return from main, exit(), and output pending in stdio buffers at exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void bye(void) { printf("atexit handler ran\n"); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "return";
    atexit(bye);
    printf("mode %s", mode); /* no newline: must still be flushed at exit */
    if (!strcmp(mode, "return"))
        return 0;
    if (!strcmp(mode, "return7"))
        return 7;
    if (!strcmp(mode, "exit3"))
        exit(3);
    if (!strcmp(mode, "exit255"))
        exit(255);
    if (!strcmp(mode, "midoutput")) {
        /* more than the runtime's output buffer, unflushed by stdio, then exit in the middle */
        for (int i = 0; i < 20000; i++)
            printf("%05d: the quick brown fox jumps over the lazy dog\n", i);
        fputs("partial line without newline", stdout);
        fputs("to stderr before exit\n", stderr);
        exit(42);
    }
    if (!strcmp(mode, "_exit")) {
        fflush(stdout);
        write(1, " raw", 4);
        _exit(9);
    }
    return 1;
}
