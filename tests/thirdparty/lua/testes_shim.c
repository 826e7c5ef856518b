/* io.tmpfile and os.tmpname for running Lua's own testes/ (tests/thirdparty/test_lua_testes.py), in both the
 * native and the guest build: the recipe's builds have neither (wasi-libc has no tmpfile or tmpnam, so
 * capsule.sources.lua makes both fail, natively too), and files.lua needs them. A temporary file is a numbered
 * name in the working directory, which is a fresh copy of testes/ for every run. */
#include <stdio.h>

FILE *testes_tmpfile(void) {
    static int n;
    char name[32];
    snprintf(name, sizeof name, "tmp_file_%d", n++);
    FILE *f = fopen(name, "w+");
    if (f)
        remove(name);
    return f;
}

void testes_tmpnam(char *buf, int *err) {
    static int n;
    snprintf(buf, 32, "tmp_name_%d", n++);
    *err = 0;
}
