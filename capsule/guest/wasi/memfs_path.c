/* memfs_path.c: the path operations of the in-memory file system (path_*), and the exported functions the
 * host calls to place files before the run and to list them after it (--file, --dir, --out). */
#include <stdlib.h>
#include <string.h>

#include "memfs.h"

static int32_t alloc_fd(struct node *n, __wasi_rights_t rights, __wasi_rights_t inheriting, uint16_t flags) {
    for (int32_t fd = 3; fd < MAX_FDS; fd++) {
        if (fs_fds[fd].kind != FD_FREE)
            continue;
        struct ofile *of = &fs_fds[fd];
        memset(of, 0, sizeof *of);
        of->kind = FD_NODE;
        of->node = n;
        of->rights = rights & ALL_RIGHTS;
        of->inheriting = inheriting & ALL_RIGHTS;
        of->fdflags = flags;
        n->open++;
        return fd;
    }
    return -1;
}

int32_t WASI(path_open)(int32_t dirfd, int32_t dirflags, int32_t path, int32_t len, int32_t oflags,
                        int64_t rights, int64_t inheriting, int32_t fdflags, int32_t out) {
    (void)dirflags;
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    int writing = ((uint64_t)rights & __WASI_RIGHTS_FD_WRITE) != 0;
    if (n) {
        if ((oflags & __WASI_OFLAGS_CREAT) && (oflags & __WASI_OFLAGS_EXCL))
            return __WASI_ERRNO_EXIST;
        if ((oflags & __WASI_OFLAGS_DIRECTORY) && n->type != __WASI_FILETYPE_DIRECTORY)
            return __WASI_ERRNO_NOTDIR;
        if (n->type == __WASI_FILETYPE_DIRECTORY && (writing || (oflags & __WASI_OFLAGS_TRUNC)))
            return __WASI_ERRNO_ISDIR;
        if ((oflags & __WASI_OFLAGS_TRUNC) && n->size) {
            e = fs_resize(n, 0);
            if (e)
                return e;
        }
    } else {
        if (!(oflags & __WASI_OFLAGS_CREAT))
            return __WASI_ERRNO_NOENT;
        if (oflags & __WASI_OFLAGS_DIRECTORY)
            return __WASI_ERRNO_INVAL;
        if (((const char *)path)[len - 1] == '/')
            return __WASI_ERRNO_ISDIR;
        n = fs_new(parent, last, last_len, __WASI_FILETYPE_REGULAR_FILE);
        if (!n)
            return __WASI_ERRNO_NOMEM;
    }
    int32_t fd = alloc_fd(n, (uint64_t)rights, (uint64_t)inheriting, (uint16_t)fdflags);
    if (fd < 0)
        return __WASI_ERRNO_MFILE;
    *(__wasi_fd_t *)out = fd;
    return 0;
}

int32_t WASI(path_create_directory)(int32_t dirfd, int32_t path, int32_t len) {
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    if (n)
        return __WASI_ERRNO_EXIST;
    return fs_new(parent, last, last_len, __WASI_FILETYPE_DIRECTORY) ? 0 : __WASI_ERRNO_NOMEM;
}

int32_t WASI(path_filestat_get)(int32_t dirfd, int32_t flags, int32_t path, int32_t len, int32_t out) {
    (void)flags;
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    if (!n)
        return __WASI_ERRNO_NOENT;
    fs_stat(n, (__wasi_filestat_t *)out);
    return 0;
}

int32_t WASI(path_filestat_set_times)(int32_t dirfd, int32_t flags, int32_t path, int32_t len, int64_t atim,
                                      int64_t mtim, int32_t fst) {
    (void)flags;
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    if (!n)
        return __WASI_ERRNO_NOENT;
    fs_set_times(n, (uint64_t)atim, (uint64_t)mtim, (uint32_t)fst);
    return 0;
}

static void unlink_node(struct node *n) {
    fs_detach(n);
    n->unlinked = 1;
    fs_release(n);
}

int32_t WASI(path_unlink_file)(int32_t dirfd, int32_t path, int32_t len) {
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    if (!n)
        return __WASI_ERRNO_NOENT;
    if (n->type == __WASI_FILETYPE_DIRECTORY)
        return __WASI_ERRNO_ISDIR;
    unlink_node(n);
    return 0;
}

int32_t WASI(path_remove_directory)(int32_t dirfd, int32_t path, int32_t len) {
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    if (!n)
        return __WASI_ERRNO_NOENT;
    if (n->type != __WASI_FILETYPE_DIRECTORY)
        return __WASI_ERRNO_NOTDIR;
    if (n == &fs_root)
        return __WASI_ERRNO_BUSY;
    if (!last)
        return __WASI_ERRNO_INVAL;
    if (n->child)
        return __WASI_ERRNO_NOTEMPTY;
    unlink_node(n);
    return 0;
}

static void mark_dirty(struct node *n) {
    n->dirty = 1;
    for (struct node *c = n->child; c; c = c->next)
        mark_dirty(c);
}

int32_t WASI(path_rename)(int32_t fd, int32_t old, int32_t old_len, int32_t new_fd, int32_t new,
                          int32_t new_len) {
    struct node *op, *on, *np, *nn;
    const char *olast, *nlast;
    size_t olast_len, nlast_len;
    int32_t e = fs_lookup(fd, (const char *)old, (size_t)old_len, &op, &on, &olast, &olast_len);
    if (e)
        return e;
    if (!on)
        return __WASI_ERRNO_NOENT;
    e = fs_lookup(new_fd, (const char *)new, (size_t)new_len, &np, &nn, &nlast, &nlast_len);
    if (e)
        return e;
    if (on == &fs_root || !olast)
        return __WASI_ERRNO_BUSY;
    if (!nlast)
        return nn == on ? 0 : __WASI_ERRNO_BUSY;
    if (nn == on)
        return 0;
    if (on->type == __WASI_FILETYPE_DIRECTORY) {
        for (struct node *d = np;; d = d->parent) { /* a directory cannot move inside itself */
            if (d == on)
                return __WASI_ERRNO_INVAL;
            if (d == &fs_root)
                break;
        }
    }
    if (nn) {
        if (on->type == __WASI_FILETYPE_DIRECTORY && nn->type != __WASI_FILETYPE_DIRECTORY)
            return __WASI_ERRNO_NOTDIR;
        if (on->type != __WASI_FILETYPE_DIRECTORY && nn->type == __WASI_FILETYPE_DIRECTORY)
            return __WASI_ERRNO_ISDIR;
        if (nn->child)
            return __WASI_ERRNO_NOTEMPTY;
    }
    char *name = malloc(nlast_len + 1);
    if (!name)
        return __WASI_ERRNO_NOMEM;
    memcpy(name, nlast, nlast_len);
    name[nlast_len] = 0;
    if (nn)
        unlink_node(nn);
    fs_detach(on);
    free(on->name);
    on->name = name;
    struct node **link = &np->child;
    while (*link)
        link = &(*link)->next;
    *link = on;
    on->next = NULL;
    on->parent = np;
    mark_dirty(on);
    return 0;
}

int32_t WASI(path_readlink)(int32_t dirfd, int32_t path, int32_t len, int32_t buf, int32_t buf_len,
                            int32_t out) {
    (void)buf, (void)buf_len, (void)out;
    struct node *parent, *n;
    const char *last;
    size_t last_len;
    int32_t e = fs_lookup(dirfd, (const char *)path, (size_t)len, &parent, &n, &last, &last_len);
    if (e)
        return e;
    return n ? __WASI_ERRNO_INVAL : __WASI_ERRNO_NOENT; /* there are no symbolic links */
}

int32_t WASI(path_link)(int32_t a, int32_t b, int32_t c, int32_t d, int32_t e, int32_t f, int32_t g) {
    (void)a, (void)b, (void)c, (void)d, (void)e, (void)f, (void)g;
    return __WASI_ERRNO_NOSYS;
}

int32_t WASI(path_symlink)(int32_t a, int32_t b, int32_t c, int32_t d, int32_t e) {
    (void)a, (void)b, (void)c, (void)d, (void)e;
    return __WASI_ERRNO_NOSYS;
}

/* -- the host's side --------------------------------------------------------------------------------- */
/* Walk `path` from the root, creating missing directories; leaves the last component to the caller. */
static int32_t make_parents(const char *path, size_t len, struct node **dir, const char **last, size_t *last_len) {
    struct node *cur = &fs_root;
    size_t i = 0;
    const char *name = NULL;
    size_t name_len = 0;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        if (i >= len)
            break;
        size_t start = i;
        while (i < len && path[i] != '/')
            i++;
        if (name) {
            struct node *c = fs_child(cur, name, name_len);
            if (!c)
                c = fs_new(cur, name, name_len, __WASI_FILETYPE_DIRECTORY);
            if (!c)
                return __WASI_ERRNO_NOMEM;
            if (c->type != __WASI_FILETYPE_DIRECTORY)
                return __WASI_ERRNO_NOTDIR;
            c->dirty = 0;
            cur = c;
        }
        name = path + start;
        name_len = i - start;
        if ((name_len == 1 && name[0] == '.') || (name_len == 2 && name[0] == '.' && name[1] == '.'))
            return __WASI_ERRNO_INVAL;
    }
    *dir = cur;
    *last = name;
    *last_len = name_len;
    return 0;
}

/* Place a file the host read (--file, --dir): `data` must come from capsule_alloc; the file takes it. */
EXPORT("capsule_fs_add") int32_t capsule_fs_add(const char *path, uint32_t len, uint8_t *data, uint32_t size) {
    struct node *dir;
    const char *last;
    size_t last_len;
    int32_t e = make_parents(path, len, &dir, &last, &last_len);
    if (e)
        return e;
    if (!last)
        return __WASI_ERRNO_INVAL;
    struct node *n = fs_child(dir, last, last_len);
    if (n && n->type == __WASI_FILETYPE_DIRECTORY)
        return __WASI_ERRNO_ISDIR;
    if (!n)
        n = fs_new(dir, last, last_len, __WASI_FILETYPE_REGULAR_FILE);
    if (!n)
        return __WASI_ERRNO_NOMEM;
    free(n->data);
    n->data = data;
    n->size = n->cap = size;
    n->dirty = 0;
    return 0;
}

EXPORT("capsule_fs_mkdir") int32_t capsule_fs_mkdir(const char *path, uint32_t len) {
    struct node *dir;
    const char *last;
    size_t last_len;
    int32_t e = make_parents(path, len, &dir, &last, &last_len);
    if (e || !last)
        return e;
    struct node *n = fs_child(dir, last, last_len);
    if (n)
        return n->type == __WASI_FILETYPE_DIRECTORY ? 0 : __WASI_ERRNO_EXIST;
    n = fs_new(dir, last, last_len, __WASI_FILETYPE_DIRECTORY);
    if (!n)
        return __WASI_ERRNO_NOMEM;
    n->dirty = 0;
    return 0;
}

/* The listing the host reads after the run (--out): one 16-byte entry per node below the root, parents
 * before children. */
struct fs_entry {
    uint32_t path;  /* address of a NUL-terminated absolute path ("/dir/file") */
    uint32_t data;  /* address of the contents (regular files) */
    uint32_t size;  /* bytes of contents */
    uint8_t type;   /* __WASI_FILETYPE_DIRECTORY or __WASI_FILETYPE_REGULAR_FILE */
    uint8_t dirty;  /* created or changed during the run */
    uint16_t pad;
};

struct fs_listing {
    uint32_t count;
    uint32_t entries; /* address of count struct fs_entry */
};

static struct fs_listing listing;

static uint32_t count_nodes(const struct node *dir) {
    uint32_t n = 0;
    for (const struct node *c = dir->child; c; c = c->next)
        n += 1 + (c->type == __WASI_FILETYPE_DIRECTORY ? count_nodes(c) : 0);
    return n;
}

static int fill(const struct node *dir, const char *prefix, struct fs_entry *out, uint32_t *at) {
    size_t plen = strlen(prefix);
    for (const struct node *c = dir->child; c; c = c->next) {
        size_t nlen = strlen(c->name);
        char *path = malloc(plen + 1 + nlen + 1);
        if (!path)
            return -1;
        memcpy(path, prefix, plen);
        path[plen] = '/';
        memcpy(path + plen + 1, c->name, nlen + 1);
        struct fs_entry *e = &out[(*at)++];
        e->path = (uint32_t)(uintptr_t)path;
        e->data = (uint32_t)(uintptr_t)c->data;
        e->size = (uint32_t)c->size;
        e->type = c->type;
        e->dirty = c->dirty;
        e->pad = 0;
        if (c->type == __WASI_FILETYPE_DIRECTORY && fill(c, path, out, at))
            return -1;
    }
    return 0;
}

EXPORT("capsule_fs_list_free") void capsule_fs_list_free(void) {
    struct fs_entry *e = (struct fs_entry *)(uintptr_t)listing.entries;
    for (uint32_t i = 0; e && i < listing.count; i++)
        free((void *)(uintptr_t)e[i].path);
    free(e);
    listing.count = 0;
    listing.entries = 0;
}

EXPORT("capsule_fs_list") struct fs_listing *capsule_fs_list(void) {
    capsule_fs_list_free();
    uint32_t n = count_nodes(&fs_root);
    struct fs_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e)
        return NULL;
    listing.entries = (uint32_t)(uintptr_t)e;
    uint32_t at = 0;
    if (fill(&fs_root, "", e, &at)) {
        listing.count = at;
        capsule_fs_list_free();
        return NULL;
    }
    listing.count = at;
    return &listing;
}
