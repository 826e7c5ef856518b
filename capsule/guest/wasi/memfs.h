/* memfs.h: the in-memory file system's nodes and descriptor table (shared by memfs.c and memfs_path.c). */
#ifndef CAPSULE_MEMFS_H
#define CAPSULE_MEMFS_H

#include "runtime.h"

struct node {
    uint8_t type;          /* __WASI_FILETYPE_DIRECTORY or __WASI_FILETYPE_REGULAR_FILE */
    uint8_t dirty;         /* created or changed since the host placed it (what --out writes back) */
    uint8_t unlinked;      /* removed from its directory; freed when the last descriptor closes */
    uint32_t open;         /* descriptors referring to it */
    char *name;            /* malloc'd, NUL-terminated */
    struct node *parent;   /* the root is its own parent */
    struct node *child;    /* first entry of a directory */
    struct node *next;     /* next entry in the parent */
    uint8_t *data;         /* regular file contents (malloc'd) */
    uint64_t size, cap;
    uint64_t ino;
    uint64_t atim, mtim, ctim;
};

enum fd_kind { FD_FREE = 0, FD_STDIN, FD_STDOUT, FD_STDERR, FD_NODE };

struct ofile {
    uint8_t kind;
    uint8_t preopen;
    uint16_t fdflags;
    __wasi_rights_t rights, inheriting;
    struct node *node;
    uint64_t pos;
};

#define MAX_FDS 256
/* Linux's limits (NAME_MAX, PATH_MAX with its NUL): a longer name or path is ENAMETOOLONG, as there */
#define FS_NAME_MAX 255
#define FS_PATH_MAX 4096
#define ALL_RIGHTS ((__wasi_rights_t)0x1fffffff)

extern struct ofile fs_fds[MAX_FDS];
extern struct node fs_root;

void fs_init(void);
struct ofile *fs_fd(int32_t fd);
struct node *fs_new(struct node *dir, const char *name, size_t len, uint8_t type);
void fs_detach(struct node *n);
void fs_release(struct node *n);
int32_t fs_lookup(int32_t dirfd, const char *path, size_t len, struct node **parent, struct node **found,
                  const char **last, size_t *last_len);
struct node *fs_child(struct node *dir, const char *name, size_t len);
void fs_stat(const struct node *n, __wasi_filestat_t *st);
int32_t fs_resize(struct node *n, uint64_t size);
void fs_set_times(struct node *n, uint64_t atim, uint64_t mtim, uint32_t flags);

#endif
