/* chmod(2) and relatives for capsule guests (see ../include/sys/stat.h): the in-memory file system has no
 * permission bits, so a change of mode succeeds without effect on a file that exists, and fails as stat
 * would on one that does not. */
#include <fcntl.h>
#include <sys/stat.h>

int chmod(const char *path, mode_t mode) {
    struct stat st;
    (void)mode;
    return stat(path, &st);
}

int fchmod(int fd, mode_t mode) {
    struct stat st;
    (void)mode;
    return fstat(fd, &st);
}

int fchmodat(int dirfd, const char *path, mode_t mode, int flags) {
    struct stat st;
    (void)mode;
    return fstatat(dirfd, path, &st, flags);
}
