/* The C library as a Linux program sees it (issue 15.5): errno values and strerror/perror texts, setlocale's
 * answers, the empty path and overlong names. tests/wasi/test_libc.py runs it natively (gcc, glibc) and in the
 * guest and requires the same output, line for line. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAMES \
    X(E2BIG) X(EACCES) X(EADDRINUSE) X(EADDRNOTAVAIL) X(EAFNOSUPPORT) X(EAGAIN) X(EALREADY) X(EBADF) \
    X(EBADMSG) X(EBUSY) X(ECANCELED) X(ECHILD) X(ECONNABORTED) X(ECONNREFUSED) X(ECONNRESET) X(EDEADLK) \
    X(EDESTADDRREQ) X(EDOM) X(EDQUOT) X(EEXIST) X(EFAULT) X(EFBIG) X(EHOSTUNREACH) X(EIDRM) X(EILSEQ) \
    X(EINPROGRESS) X(EINTR) X(EINVAL) X(EIO) X(EISCONN) X(EISDIR) X(ELOOP) X(EMFILE) X(EMLINK) X(EMSGSIZE) \
    X(EMULTIHOP) X(ENAMETOOLONG) X(ENETDOWN) X(ENETRESET) X(ENETUNREACH) X(ENFILE) X(ENOBUFS) X(ENODEV) \
    X(ENOENT) X(ENOEXEC) X(ENOLCK) X(ENOLINK) X(ENOMEM) X(ENOMSG) X(ENOPROTOOPT) X(ENOSPC) X(ENOSYS) \
    X(ENOTCONN) X(ENOTDIR) X(ENOTEMPTY) X(ENOTRECOVERABLE) X(ENOTSOCK) X(ENOTSUP) X(ENOTTY) X(ENXIO) \
    X(EOVERFLOW) X(EOWNERDEAD) X(EPERM) X(EPIPE) X(EPROTO) X(EPROTONOSUPPORT) X(EPROTOTYPE) X(ERANGE) \
    X(EROFS) X(ESPIPE) X(ESRCH) X(ESTALE) X(ETIMEDOUT) X(ETXTBSY) X(EXDEV) X(EOPNOTSUPP) X(EWOULDBLOCK)

/* what a call gave: errno only on failure (a call that succeeds may leave any errno, natively too) */
static void report(const char *what, int result) {
    int e = errno;
    if (result < 0)
        printf("%s: fails, errno %d (%s)\n", what, e, strerror(e));
    else
        printf("%s: succeeds\n", what);
}

static void numbers(void) {
#define X(e) printf("%s %d %s\n", #e, e, strerror(e));
    NAMES
#undef X
    printf("EWOULDBLOCK==EAGAIN %d, EOPNOTSUPP==ENOTSUP %d\n", EWOULDBLOCK == EAGAIN, EOPNOTSUPP == ENOTSUP);
    for (int e = -2; e <= 135; e++)
        printf("strerror(%d) = %s\n", e, strerror(e));
    char small[8];
    int r = strerror_r(ENOENT, small, sizeof small);
    printf("strerror_r small: %d %s (ERANGE %d)\n", r, small, r == ERANGE);
    char big[64];
    printf("strerror_r: %d %s\n", strerror_r(EACCES, big, sizeof big), big);
}

static void files(void) {
    struct stat st;
    char name[300], path[5000];
    errno = 0;
    FILE *f = fopen("missing.txt", "r");
    printf("fopen missing: %s, errno %d == ENOENT %d: %s\n", f ? "opened" : "NULL", errno, errno == ENOENT,
           strerror(errno));
    int saved = errno;
    perror("perror after fopen");
    errno = saved; /* glibc's perror may change errno */
    perror(NULL);
    errno = saved;
    perror("");
    errno = saved;
    report("open(\"\")", open("", O_RDONLY));
    report("open(\"\", O_CREAT)", open("", O_WRONLY | O_CREAT, 0644));
    report("stat(\"\")", stat("", &st));
    report("mkdir(\"\")", mkdir("", 0755));
    report("unlink(\"\")", unlink(""));
    errno = 0;
    f = fopen("", "r");
    printf("fopen(\"\"): %s, errno %d\n", f ? "opened" : "NULL", errno);
    memset(name, 'n', 255);
    name[255] = '\0';
    int fd = open(name, O_WRONLY | O_CREAT, 0644);
    report("create a 255-byte name", fd);
    if (fd >= 0) {
        close(fd);
        unlink(name);
    }
    memset(name, 'n', 256);
    name[256] = '\0';
    report("create a 256-byte name", open(name, O_WRONLY | O_CREAT, 0644));
    report("open a 256-byte name", open(name, O_RDONLY));
    report("stat a 256-byte name", stat(name, &st));
    report("mkdir a 256-byte name", mkdir(name, 0755));
    for (size_t i = 0; i + 2 < sizeof path; i += 2) {
        path[i] = 'd';
        path[i + 1] = '/';
    }
    path[sizeof path - 1] = '\0';
    report("open a 4999-byte path", open(path, O_RDONLY));
    report("open a directory for writing", open(".", O_WRONLY));
    report("rmdir a missing directory", rmdir("nothing"));
    report("mkdir an existing directory", mkdir(".", 0755));
    fd = open("made.txt", O_WRONLY | O_CREAT | O_EXCL, 0644);
    report("create made.txt", fd);
    report("create made.txt again, O_EXCL", open("made.txt", O_WRONLY | O_CREAT | O_EXCL, 0644));
    report("made.txt/x", open("made.txt/x", O_RDONLY));
    close(fd);
    unlink("made.txt");
    report("close a closed descriptor", close(fd));
    errno = 0;
    DIR *d = opendir(".");
    while (d && readdir(d))
        ;
    printf("readdir to the end: errno %d\n", errno);
    if (d)
        closedir(d);
}

static void numbers_from_the_library(void) {
    errno = 0;
    long v = strtol("99999999999999999999999", NULL, 10);
    printf("strtol overflow: %ld errno %d == ERANGE %d\n", v == 0 ? 0L : 1L, errno, errno == ERANGE);
    errno = EINTR;
    printf("kept: %d (%s)\n", errno, strerror(errno));
    errno = 0;
    printf("after printf: %d\n", errno);
    errno = 0;
    volatile size_t huge = (size_t)-1;
    static void *volatile p; /* kept, or clang may drop the allocation and take it for a success */
    p = malloc(huge);
    printf("malloc(SIZE_MAX): %s errno %d == ENOMEM %d\n", p ? "memory" : "NULL", errno, errno == ENOMEM);
}

static void locales(void) {
    const char *names[] = {"C", "POSIX", "", "C.UTF-8", "C.utf8", "de_DE.UTF-8", "en_US.UTF-8", "xx", "c"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *r = setlocale(LC_ALL, names[i]);
        printf("setlocale(LC_ALL, \"%s\") = %s\n", names[i], r ? r : "NULL");
    }
    setlocale(LC_ALL, "C");
    printf("LC_CTYPE C.UTF-8: %s\n", setlocale(LC_CTYPE, "C.UTF-8"));
    printf("LC_ALL now: %s\n", setlocale(LC_ALL, NULL));
    printf("LC_NUMERIC now: %s\n", setlocale(LC_NUMERIC, NULL));
    printf("LC_TIME de_DE: %s\n", setlocale(LC_TIME, "de_DE") ? "accepted" : "NULL");
    printf("back to C: %s\n", setlocale(LC_ALL, "POSIX"));
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "all";
    if (!strcmp(part, "all") || !strcmp(part, "numbers"))
        numbers();
    if (!strcmp(part, "all") || !strcmp(part, "files"))
        files();
    if (!strcmp(part, "all") || !strcmp(part, "library"))
        numbers_from_the_library();
    if (!strcmp(part, "all") || !strcmp(part, "locales"))
        locales();
    return 0;
}
