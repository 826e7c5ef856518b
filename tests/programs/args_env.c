/* argv and the environment reach main; getenv, setenv, unsetenv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv) {
    printf("argc %d argv0 %s\n", argc, argv[0]);
    for (int i = 1; i < argc; i++)
        printf("argv[%d] = \"%s\" (%zu)\n", i, argv[i], strlen(argv[i]));
    printf("argv[argc] %s\n", argv[argc] == NULL ? "NULL" : "set");
    int n = 0;
    for (char **e = environ; *e; e++)
        n++;
    printf("environ %d\n", n);
    const char *keys[] = {"HOME", "GREETING", "EMPTY", "MISSING", "WITH_EQUALS"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *v = getenv(keys[i]);
        printf("%s=%s\n", keys[i], v ? v : "(unset)");
    }
    setenv("ADDED", "yes", 1);
    setenv("GREETING", "replaced", 0);
    unsetenv("HOME");
    printf("after: ADDED=%s GREETING=%s HOME=%s\n", getenv("ADDED"), getenv("GREETING"),
           getenv("HOME") ? getenv("HOME") : "(unset)");
    return argc;
}
