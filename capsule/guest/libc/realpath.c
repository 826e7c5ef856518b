/* realpath(3) for capsule guests (see ../include/stdlib.h).
 *
 * The guest's file system has no symbolic links, so resolving a path is lexical: make it absolute against the
 * working directory, drop "." and empty components, let ".." remove the one before it (".." of the root is the
 * root), and then require the result to exist, as POSIX does (ENOENT otherwise; ENOTDIR when a component that
 * must be a directory is not). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *realpath(const char *restrict path, char *restrict resolved) {
    char buf[PATH_MAX];
    size_t n = 0;
    struct stat st;
    if (path == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (path[0] == '\0') {
        errno = ENOENT;
        return NULL;
    }
    if (path[0] != '/') {
        if (getcwd(buf, sizeof buf) == NULL)
            return NULL;
        n = strlen(buf);
        while (n > 0 && buf[n - 1] == '/')
            n--;
    }
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        const char *end = p;
        while (*end && *end != '/')
            end++;
        size_t len = (size_t)(end - p);
        if (len == 0 || (len == 1 && p[0] == '.')) {
            /* nothing to add */
        } else if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (n > 0 && buf[n - 1] != '/')
                n--;
            if (n > 0)
                n--; /* the slash before the removed component */
        } else {
            if (n + 1 + len >= sizeof buf) {
                errno = ENAMETOOLONG;
                return NULL;
            }
            buf[n++] = '/';
            memcpy(buf + n, p, len);
            n += len;
        }
        p = end;
        if (*p == '/' && n > 0) {
            buf[n] = '\0';
            if (stat(buf, &st) != 0)
                return NULL;
            if (!S_ISDIR(st.st_mode)) {
                errno = ENOTDIR;
                return NULL;
            }
        }
    }
    if (n == 0)
        buf[n++] = '/';
    buf[n] = '\0';
    if (stat(buf, &st) != 0)
        return NULL;
    if (resolved == NULL)
        return strdup(buf);
    memcpy(resolved, buf, n + 1);
    return resolved;
}
