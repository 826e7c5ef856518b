/* system(3) for capsule guests: there is no shell to run a command in. wasi-libc declares system() but does
 * not define it, so programs that merely mention it (SQLite's shell, DOOM) would not link. */
#include <errno.h>
#include <stdlib.h>

int system(const char *command) {
    if (command == NULL)
        return 0; /* "is a command processor available?": no */
    errno = ENOSYS;
    return -1;
}
