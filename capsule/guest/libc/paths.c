/* The empty path names no file, as on Linux (open(""), stat(""), fopen("") fail with ENOENT).
 *
 * wasi-libc resolves every path of a file call through __wasilibc_find_relpath_alloc (when chdir is linked in;
 * otherwise through __wasilibc_find_abspath) into a directory and a name relative to it, turning "" into "." of
 * the working directory, so that open("") opened that directory. The link wraps it (-Wl,--wrap, see
 * capsule.toolchain.guest) so that it is always there and is this: the empty path resolves like "." and then
 * loses its name, so that the file system is asked for the empty name in the working directory, which it refuses
 * with ENOENT (wasi/memfs.c fs_lookup; a "no directory holds it" -1 here would become ENOTCAPABLE in wasi-libc's
 * callers). Overlong names are refused by the file system too (ENAMETOOLONG). */
#include <stddef.h>
#include <wasi/libc-find-relpath.h>

int __real___wasilibc_find_relpath_alloc(const char *path, const char **abs, char **relative, size_t *relative_len,
                                         int can_realloc) __attribute__((weak));

int __wrap___wasilibc_find_relpath_alloc(const char *path, const char **abs, char **relative, size_t *relative_len,
                                         int can_realloc) {
    int empty = path[0] == '\0';
    int fd;
    if (__real___wasilibc_find_relpath_alloc) {
        fd = __real___wasilibc_find_relpath_alloc(empty ? "." : path, abs, relative, relative_len, can_realloc);
        if (fd != -1 && empty)
            (*relative)[0] = '\0'; /* the buffer is wasi-libc's, of at least 2 bytes now */
    } else {
        /* what wasi-libc does without chdir: the path as it is, against the preopened directories */
        fd = __wasilibc_find_abspath(empty ? "." : path, abs, (const char **)relative);
        if (fd != -1 && empty)
            *relative = (char *)"";
    }
    return fd;
}
