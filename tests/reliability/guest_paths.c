/* Tries to leave its sandbox: writes (mode "w") or reads (mode "r") every path named on its command line and
   prints what happened, one line each. Used by tests/reliability/test_guest_paths.py. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

static void try_write(const char *name) {
    FILE *f = fopen(name, "w");
    if (!f) {
        printf("w %.40s: errno %d\n", name, errno);
        return;
    }
    fputs("from the guest\n", f);
    printf("w %.40s: %s\n", name, fclose(f) == 0 ? "ok" : "close failed");
}

static void try_read(const char *name) {
    char buf[64] = {0};
    FILE *f = fopen(name, "r");
    if (!f) {
        printf("r %.40s: errno %d\n", name, errno);
        return;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    printf("r %.40s: %zu bytes: %s\n", name, n, buf);
}

int main(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        if (argv[1][0] == 'w')
            try_write(argv[i]);
        else
            try_read(argv[i]);
    }
    return 0;
}
