/* memfs.c: the in-memory file system's nodes and the descriptor operations (fd_*).
 *
 * Files live in guest memory (malloc), so the host fills them before the run and reads them after it by
 * reading guest memory in place. Descriptors 0-2 are the host's streams (wasi_io.c); descriptor 3 is the
 * one preopened directory, the root "/": --dir and --file mappings are placed inside it by the host.
 */
#include <stdlib.h>
#include <string.h>

#include "memfs.h"

struct node fs_root = {.type = __WASI_FILETYPE_DIRECTORY, .name = "", .parent = &fs_root, .ino = 1};
struct ofile fs_fds[MAX_FDS] = {
    [0] = {.kind = FD_STDIN},
    [1] = {.kind = FD_STDOUT},
    [2] = {.kind = FD_STDERR},
    [3] = {.kind = FD_NODE, .preopen = 1, .rights = ALL_RIGHTS, .inheriting = ALL_RIGHTS, .node = &fs_root},
};
static uint64_t next_ino = 2;

struct ofile *fs_fd(int32_t fd) {
    if (fd < 0 || fd >= MAX_FDS || fs_fds[fd].kind == FD_FREE)
        return NULL;
    return &fs_fds[fd];
}

struct node *fs_child(struct node *dir, const char *name, size_t len) {
    for (struct node *c = dir->child; c; c = c->next)
        if (strlen(c->name) == len && memcmp(c->name, name, len) == 0)
            return c;
    return NULL;
}

static void attach(struct node *dir, struct node *n) {
    struct node **link = &dir->child;
    while (*link)
        link = &(*link)->next;
    *link = n;
    n->next = NULL;
    n->parent = dir;
}

struct node *fs_new(struct node *dir, const char *name, size_t len, uint8_t type) {
    struct node *n = calloc(1, sizeof *n);
    char *copy = malloc(len + 1);
    if (!n || !copy) {
        free(n);
        free(copy);
        return NULL;
    }
    memcpy(copy, name, len);
    copy[len] = 0;
    n->type = type;
    n->name = copy;
    n->ino = next_ino++;
    n->dirty = 1;
    n->atim = n->mtim = n->ctim = rt_now(__WASI_CLOCKID_REALTIME);
    attach(dir, n);
    return n;
}

void fs_detach(struct node *n) {
    struct node **link = &n->parent->child;
    while (*link && *link != n)
        link = &(*link)->next;
    if (*link)
        *link = n->next;
    n->next = NULL;
}

/* Free a node that is out of the tree once no descriptor refers to it any more. */
void fs_release(struct node *n) {
    if (!n->unlinked || n->open || n == &fs_root)
        return;
    free(n->data);
    free(n->name);
    free(n);
}

/* Resolve `path` against directory descriptor `dirfd`: every component but the last must be a directory.
 * On success *parent is the directory that holds (or would hold) the last component, *found the node it
 * names or NULL, and *last and *last_len its name; *last is NULL when the path names a directory through "."
 * or "..". ".." never leaves the root. */
int32_t fs_lookup(int32_t dirfd, const char *path, size_t len, struct node **parent, struct node **found,
                  const char **last, size_t *last_len) {
    struct ofile *of = fs_fd(dirfd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE || of->node->type != __WASI_FILETYPE_DIRECTORY)
        return __WASI_ERRNO_NOTDIR;
    if (len == 0)
        return __WASI_ERRNO_NOENT;
    if (len >= FS_PATH_MAX)
        return __WASI_ERRNO_NAMETOOLONG;
    struct node *cur = of->node;
    const char *name = NULL;
    size_t name_len = 0;
    int trailing_slash = path[len - 1] == '/';
    size_t i = 0;
    if (path[0] == '/')
        cur = &fs_root;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        if (i >= len)
            break;
        size_t start = i;
        while (i < len && path[i] != '/')
            i++;
        const char *comp = path + start;
        size_t comp_len = i - start;
        if (comp_len > FS_NAME_MAX)
            return __WASI_ERRNO_NAMETOOLONG;
        if (name) {
            struct node *c = fs_child(cur, name, name_len);
            if (!c)
                return __WASI_ERRNO_NOENT;
            if (c->type != __WASI_FILETYPE_DIRECTORY)
                return __WASI_ERRNO_NOTDIR;
            cur = c;
            name = NULL;
        }
        if (comp_len == 1 && comp[0] == '.')
            continue;
        if (comp_len == 2 && comp[0] == '.' && comp[1] == '.') {
            cur = cur->parent;
            continue;
        }
        name = comp;
        name_len = comp_len;
    }
    if (!name) {
        *parent = cur->parent;
        *found = cur;
        *last = NULL;
        *last_len = 0;
        return 0;
    }
    *parent = cur;
    *found = fs_child(cur, name, name_len);
    *last = name;
    *last_len = name_len;
    if (trailing_slash && *found && (*found)->type != __WASI_FILETYPE_DIRECTORY)
        return __WASI_ERRNO_NOTDIR;
    return 0;
}

void fs_stat(const struct node *n, __wasi_filestat_t *st) {
    memset(st, 0, sizeof *st);
    st->dev = 1;
    st->ino = n->ino;
    st->filetype = n->type;
    st->nlink = n->unlinked ? 0 : 1;
    st->size = n->type == __WASI_FILETYPE_REGULAR_FILE ? n->size : 4096;
    st->atim = n->atim;
    st->mtim = n->mtim;
    st->ctim = n->ctim;
}

int32_t fs_resize(struct node *n, uint64_t size) {
    if (size > 0x7fffffffu)
        return __WASI_ERRNO_FBIG;
    if (size > n->cap) {
        uint64_t cap = n->cap * 2 > size ? n->cap * 2 : size;
        if (cap < 64)
            cap = 64;
        uint8_t *d = realloc(n->data, (size_t)cap);
        if (!d)
            return __WASI_ERRNO_NOSPC;
        n->data = d;
        n->cap = cap;
    }
    if (size > n->size)
        memset(n->data + n->size, 0, (size_t)(size - n->size));
    n->size = size;
    n->dirty = 1;
    n->mtim = n->ctim = rt_now(__WASI_CLOCKID_REALTIME);
    return 0;
}

/* -- reading and writing ---------------------------------------------------------------------------- */
static int32_t file_of(int32_t fd, __wasi_rights_t need, struct ofile **out) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE) {
        *out = of;
        return 0;
    }
    if (of->node->type == __WASI_FILETYPE_DIRECTORY)
        return need == __WASI_RIGHTS_FD_READ ? __WASI_ERRNO_ISDIR : __WASI_ERRNO_BADF;
    if (!(of->rights & need))
        return __WASI_ERRNO_BADF;
    *out = of;
    return 0;
}

static int32_t write_at(struct node *n, const __wasi_ciovec_t *iovs, size_t count, uint64_t pos,
                        __wasi_size_t *written) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++)
        total += iovs[i].buf_len;
    if (pos + total > n->size) {
        int32_t e = fs_resize(n, pos + total);
        if (e)
            return e;
    }
    for (size_t i = 0; i < count; i++) {
        memcpy(n->data + pos, iovs[i].buf, iovs[i].buf_len);
        pos += iovs[i].buf_len;
    }
    n->dirty = 1;
    n->mtim = n->ctim = rt_now(__WASI_CLOCKID_REALTIME);
    *written = (__wasi_size_t)total;
    return 0;
}

static size_t read_at(struct node *n, const __wasi_iovec_t *iovs, size_t count, uint64_t pos) {
    size_t got = 0;
    for (size_t i = 0; i < count && pos < n->size; i++) {
        uint64_t avail = n->size - pos;
        size_t k = iovs[i].buf_len < avail ? iovs[i].buf_len : (size_t)avail;
        memcpy(iovs[i].buf, n->data + pos, k);
        pos += k;
        got += k;
    }
    return got;
}

int32_t WASI(fd_write)(int32_t fd, int32_t iovs, int32_t count, int32_t out) {
    struct ofile *of;
    int32_t e = file_of(fd, __WASI_RIGHTS_FD_WRITE, &of);
    if (e)
        return e;
    const __wasi_ciovec_t *v = (const __wasi_ciovec_t *)iovs;
    __wasi_size_t *written = (__wasi_size_t *)out;
    if (of->kind == FD_STDOUT || of->kind == FD_STDERR)
        return rt_std_write(of->kind == FD_STDOUT ? 1 : 2, v, (size_t)count, written);
    if (of->kind != FD_NODE)
        return __WASI_ERRNO_BADF;
    if (of->fdflags & __WASI_FDFLAGS_APPEND)
        of->pos = of->node->size;
    e = write_at(of->node, v, (size_t)count, of->pos, written);
    if (!e)
        of->pos += *written;
    return e;
}

int32_t WASI(fd_pwrite)(int32_t fd, int32_t iovs, int32_t count, int64_t offset, int32_t out) {
    struct ofile *of;
    int32_t e = file_of(fd, __WASI_RIGHTS_FD_WRITE, &of);
    if (e)
        return e;
    if (of->kind != FD_NODE)
        return __WASI_ERRNO_SPIPE;
    if (offset < 0)
        return __WASI_ERRNO_INVAL;
    return write_at(of->node, (const __wasi_ciovec_t *)iovs, (size_t)count, (uint64_t)offset,
                    (__wasi_size_t *)out);
}

int32_t WASI(fd_read)(int32_t fd, int32_t iovs, int32_t count, int32_t out) {
    struct ofile *of;
    int32_t e = file_of(fd, __WASI_RIGHTS_FD_READ, &of);
    if (e)
        return e;
    const __wasi_iovec_t *v = (const __wasi_iovec_t *)iovs;
    if (of->kind == FD_STDIN)
        return rt_std_read(v, (size_t)count, (__wasi_size_t *)out);
    if (of->kind != FD_NODE)
        return __WASI_ERRNO_BADF;
    size_t got = read_at(of->node, v, (size_t)count, of->pos);
    of->pos += got;
    *(__wasi_size_t *)out = (__wasi_size_t)got;
    return 0;
}

int32_t WASI(fd_pread)(int32_t fd, int32_t iovs, int32_t count, int64_t offset, int32_t out) {
    struct ofile *of;
    int32_t e = file_of(fd, __WASI_RIGHTS_FD_READ, &of);
    if (e)
        return e;
    if (of->kind != FD_NODE)
        return __WASI_ERRNO_SPIPE;
    if (offset < 0)
        return __WASI_ERRNO_INVAL;
    size_t got = read_at(of->node, (const __wasi_iovec_t *)iovs, (size_t)count, (uint64_t)offset);
    *(__wasi_size_t *)out = (__wasi_size_t)got;
    return 0;
}

int32_t WASI(fd_seek)(int32_t fd, int64_t offset, int32_t whence, int32_t out) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE)
        return __WASI_ERRNO_SPIPE;
    int64_t base;
    if (whence == __WASI_WHENCE_SET)
        base = 0;
    else if (whence == __WASI_WHENCE_CUR)
        base = (int64_t)of->pos;
    else if (whence == __WASI_WHENCE_END)
        base = (int64_t)of->node->size;
    else
        return __WASI_ERRNO_INVAL;
    if (base + offset < 0)
        return __WASI_ERRNO_INVAL;
    of->pos = (uint64_t)(base + offset);
    *(__wasi_filesize_t *)out = of->pos;
    return 0;
}

int32_t WASI(fd_tell)(int32_t fd, int32_t out) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE)
        return __WASI_ERRNO_SPIPE;
    *(__wasi_filesize_t *)out = of->pos;
    return 0;
}

int32_t WASI(fd_close)(int32_t fd) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    struct node *n = of->kind == FD_NODE ? of->node : NULL;
    memset(of, 0, sizeof *of);
    if (n) {
        n->open--;
        fs_release(n);
    }
    return 0;
}

int32_t WASI(fd_renumber)(int32_t from, int32_t to) {
    struct ofile *a = fs_fd(from), *b = fs_fd(to);
    if (!a || !b)
        return __WASI_ERRNO_BADF;
    if (from == to)
        return 0;
    WASI(fd_close)(to);
    fs_fds[to] = fs_fds[from];
    memset(&fs_fds[from], 0, sizeof fs_fds[from]);
    return 0;
}

/* -- descriptor and file attributes ----------------------------------------------------------------- */
static uint8_t std_filetype(int which) {
    return (rt_io.tty >> which) & 1 ? __WASI_FILETYPE_CHARACTER_DEVICE : __WASI_FILETYPE_UNKNOWN;
}

int32_t WASI(fd_fdstat_get)(int32_t fd, int32_t out) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    __wasi_fdstat_t *st = (__wasi_fdstat_t *)out;
    memset(st, 0, sizeof *st);
    st->fs_flags = of->fdflags;
    if (of->kind == FD_NODE) {
        st->fs_filetype = of->node->type;
        st->fs_rights_base = of->rights;
        st->fs_rights_inheriting = of->inheriting;
        return 0;
    }
    int which = of->kind - FD_STDIN;
    st->fs_filetype = std_filetype(which);
    st->fs_rights_base = (which == 0 ? __WASI_RIGHTS_FD_READ : __WASI_RIGHTS_FD_WRITE) |
                         __WASI_RIGHTS_POLL_FD_READWRITE | __WASI_RIGHTS_FD_FDSTAT_SET_FLAGS;
    if (st->fs_filetype != __WASI_FILETYPE_CHARACTER_DEVICE) /* a terminal is what lacks seek/tell */
        st->fs_rights_base |= __WASI_RIGHTS_FD_SEEK | __WASI_RIGHTS_FD_TELL;
    return 0;
}

int32_t WASI(fd_fdstat_set_flags)(int32_t fd, int32_t flags) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    of->fdflags = (uint16_t)flags;
    return 0;
}

int32_t WASI(fd_fdstat_set_rights)(int32_t fd, int64_t base, int64_t inheriting) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE)
        return 0;
    if (((uint64_t)base & ~of->rights) || ((uint64_t)inheriting & ~of->inheriting))
        return __WASI_ERRNO_NOTCAPABLE;
    of->rights = (uint64_t)base;
    of->inheriting = (uint64_t)inheriting;
    return 0;
}

int32_t WASI(fd_filestat_get)(int32_t fd, int32_t out) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    __wasi_filestat_t *st = (__wasi_filestat_t *)out;
    if (of->kind == FD_NODE) {
        fs_stat(of->node, st);
        return 0;
    }
    memset(st, 0, sizeof *st);
    st->filetype = std_filetype(of->kind - FD_STDIN);
    st->nlink = 1;
    return 0;
}

int32_t WASI(fd_filestat_set_size)(int32_t fd, int64_t size) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE || of->node->type != __WASI_FILETYPE_REGULAR_FILE)
        return __WASI_ERRNO_INVAL;
    if (!(of->rights & (__WASI_RIGHTS_FD_FILESTAT_SET_SIZE | __WASI_RIGHTS_FD_WRITE)))
        return __WASI_ERRNO_BADF;
    if (size < 0)
        return __WASI_ERRNO_INVAL;
    return fs_resize(of->node, (uint64_t)size);
}

void fs_set_times(struct node *n, uint64_t atim, uint64_t mtim, uint32_t flags) {
    uint64_t now = rt_now(__WASI_CLOCKID_REALTIME);
    if (flags & __WASI_FSTFLAGS_ATIM)
        n->atim = atim;
    else if (flags & __WASI_FSTFLAGS_ATIM_NOW)
        n->atim = now;
    if (flags & __WASI_FSTFLAGS_MTIM)
        n->mtim = mtim;
    else if (flags & __WASI_FSTFLAGS_MTIM_NOW)
        n->mtim = now;
    n->ctim = now;
}

int32_t WASI(fd_filestat_set_times)(int32_t fd, int64_t atim, int64_t mtim, int32_t flags) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE)
        return 0;
    fs_set_times(of->node, (uint64_t)atim, (uint64_t)mtim, (uint32_t)flags);
    return 0;
}

int32_t WASI(fd_sync)(int32_t fd) { return fs_fd(fd) ? 0 : __WASI_ERRNO_BADF; }
int32_t WASI(fd_datasync)(int32_t fd) { return fs_fd(fd) ? 0 : __WASI_ERRNO_BADF; }

int32_t WASI(fd_advise)(int32_t fd, int64_t offset, int64_t len, int32_t advice) {
    (void)offset, (void)len, (void)advice;
    return fs_fd(fd) ? 0 : __WASI_ERRNO_BADF;
}

int32_t WASI(fd_allocate)(int32_t fd, int64_t offset, int64_t len) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE || of->node->type != __WASI_FILETYPE_REGULAR_FILE)
        return __WASI_ERRNO_INVAL;
    if (offset < 0 || len <= 0)
        return __WASI_ERRNO_INVAL;
    uint64_t end = (uint64_t)offset + (uint64_t)len;
    return end > of->node->size ? fs_resize(of->node, end) : 0;
}

/* -- the preopened root ------------------------------------------------------------------------------ */
int32_t WASI(fd_prestat_get)(int32_t fd, int32_t out) {
    struct ofile *of = fs_fd(fd);
    if (!of || !of->preopen)
        return __WASI_ERRNO_BADF;
    __wasi_prestat_t *p = (__wasi_prestat_t *)out;
    memset(p, 0, sizeof *p);
    p->tag = __WASI_PREOPENTYPE_DIR;
    p->u.dir.pr_name_len = 1;
    return 0;
}

int32_t WASI(fd_prestat_dir_name)(int32_t fd, int32_t buf, int32_t len) {
    struct ofile *of = fs_fd(fd);
    if (!of || !of->preopen)
        return __WASI_ERRNO_BADF;
    if (len < 1)
        return __WASI_ERRNO_NAMETOOLONG;
    *(char *)buf = '/';
    return 0;
}

/* -- directories ------------------------------------------------------------------------------------- */
/* Entries are ".", "..", then the children in creation order; the cookie is the entry's index. */
int32_t WASI(fd_readdir)(int32_t fd, int32_t buf, int32_t buf_len, int64_t cookie, int32_t out) {
    struct ofile *of = fs_fd(fd);
    if (!of)
        return __WASI_ERRNO_BADF;
    if (of->kind != FD_NODE || of->node->type != __WASI_FILETYPE_DIRECTORY)
        return __WASI_ERRNO_NOTDIR;
    uint8_t *dst = (uint8_t *)buf;
    size_t cap = (size_t)buf_len, used = 0;
    struct node *dir = of->node, *child = dir->child;
    for (uint64_t index = 0; used < cap; index++) {
        const char *name;
        const struct node *n;
        if (index == 0) {
            name = ".";
            n = dir;
        } else if (index == 1) {
            name = "..";
            n = dir->parent;
        } else {
            if (!child)
                break;
            n = child;
            name = child->name;
            child = child->next;
        }
        if (index < (uint64_t)cookie)
            continue;
        __wasi_dirent_t d;
        memset(&d, 0, sizeof d);
        size_t name_len = strlen(name);
        d.d_next = index + 1;
        d.d_ino = n->ino;
        d.d_namlen = (__wasi_dirnamlen_t)name_len;
        d.d_type = n->type;
        size_t k = cap - used < sizeof d ? cap - used : sizeof d;
        memcpy(dst + used, &d, k);
        used += k;
        k = cap - used < name_len ? cap - used : name_len;
        memcpy(dst + used, name, k);
        used += k;
    }
    *(__wasi_size_t *)out = (__wasi_size_t)used;
    return 0;
}
