/* File I/O through the file system: stdio and POSIX calls, directories, errors by errno name. Runs in a
 * directory holding input.txt; leaves out/ behind, whose contents the harness compares. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *err(void) {
    switch (errno) {
    case 0: return "OK";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case ENOTEMPTY: return "ENOTEMPTY";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    default: return "other";
    }
}

/* Descriptor numbers are not printed (opens are tested as ">= 0 ? 0 : -1"): WASI preopens take some. */
#define TRY(expr) do { errno = 0; long r_ = (long)(expr); printf("%-48s -> %ld %s\n", #expr, r_ < 0 ? -1L : r_, r_ < 0 ? err() : "OK"); } while (0)

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void list(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        printf("opendir %s failed %s\n", path, err());
        return;
    }
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    printf("ls %s:", path);
    for (int i = 0; i < n; i++) {
        struct stat st;
        char full[256];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        stat(full, &st);
        printf(" %s%s(%lld)", names[i], S_ISDIR(st.st_mode) ? "/" : "", S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
        free(names[i]);
    }
    printf("\n");
}

int main(void) {
    FILE *in = fopen("input.txt", "r");
    char line[256];
    int lines = 0;
    while (in && fgets(line, sizeof line, in))
        lines++;
    printf("input lines %d\n", lines);
    if (in) fclose(in);

    TRY(mkdir("out", 0755));
    TRY(mkdir("out", 0755));
    TRY(mkdir("out/sub", 0755));
    TRY(mkdir("missing/sub", 0755));
    FILE *f = fopen("out/a.txt", "w");
    for (int i = 0; i < 1000; i++)
        fprintf(f, "line %d of a\n", i);
    fclose(f);
    f = fopen("out/a.txt", "a");
    fputs("appended\n", f);
    fclose(f);
    f = fopen("out/a.txt", "r+");
    fseek(f, 0, SEEK_END);
    printf("size via ftell %ld\n", ftell(f));
    fseek(f, 5, SEEK_SET);
    fputs("XXXX", f);
    fseek(f, -9, SEEK_END);
    fgets(line, sizeof line, f);
    printf("tail [%s]\n", strtok(line, "\n"));
    rewind(f);
    fgets(line, sizeof line, f);
    printf("head [%s]\n", strtok(line, "\n"));
    fclose(f);

    int fd = open("out/b.bin", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    unsigned char bytes[300];
    for (int i = 0; i < 300; i++)
        bytes[i] = (unsigned char)(i * 7);
    TRY(write(fd, bytes, sizeof bytes));
    TRY(pwrite(fd, "AB", 2, 1000));
    TRY(lseek(fd, 0, SEEK_CUR));
    TRY(ftruncate(fd, 600));
    TRY(close(fd));
    TRY(close(fd));
    TRY(write(fd, "x", 1));
    fd = open("out/b.bin", O_RDONLY);
    unsigned char back[4];
    TRY(pread(fd, back, 4, 298));
    printf("pread %d %d %d %d\n", back[0], back[1], back[2], back[3]);
    TRY(write(fd, "x", 1));
    struct stat st;
    TRY(fstat(fd, &st));
    printf("fstat size %lld reg %d\n", (long long)st.st_size, S_ISREG(st.st_mode));
    close(fd);

    TRY(open("out/new.txt", O_CREAT | O_EXCL | O_WRONLY, 0644) >= 0 ? 0 : -1);
    TRY(open("out/new.txt", O_CREAT | O_EXCL | O_WRONLY, 0644) >= 0 ? 0 : -1);
    TRY(open("nope.txt", O_RDONLY) >= 0 ? 0 : -1);
    TRY(open("out/a.txt/x", O_RDONLY) >= 0 ? 0 : -1);
    TRY(open("out", O_WRONLY) >= 0 ? 0 : -1);
    TRY(open("out/a.txt", O_RDONLY | O_DIRECTORY) >= 0 ? 0 : -1);
    TRY(rename("out/new.txt", "out/sub/moved.txt"));
    TRY(rename("out/none", "out/x"));
    TRY(rmdir("out/sub"));
    TRY(unlink("out/sub"));
    TRY(mkdir("out/tmp", 0755));
    TRY(rmdir("out/tmp"));
    f = fopen("out/gone.txt", "w");
    fputs("soon deleted", f);
    fclose(f);
    TRY(unlink("out/gone.txt"));
    TRY(unlink("out/gone.txt"));
    TRY(stat("out/gone.txt", &st));
    TRY(access("out/a.txt", F_OK));
    TRY(access("out/zzz", F_OK));
    list("out");
    list("out/sub");
    list("nothere");
    f = fopen("out/sub/moved.txt", "w");
    fprintf(f, "%d lines in input\n", lines);
    fclose(f);
    return 0;
}
