/* wasi_io.c: the non-file half of capsule's guest WASI runtime.
 *
 * Standard output and error go into one record buffer that the host drains in place (see capsule_io.h);
 * standard input comes from a buffer the host refills. Arguments and the environment are blobs the host
 * writes before _start. Clocks, randomness, exit and yields are the four capsule intrinsics. Everything
 * here is plain integer C so the capsule compiler can turn it into BPF like the program itself.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define OUT_CAP (64 * 1024)
#define IN_CAP (64 * 1024)

static uint8_t out_buf[OUT_CAP] __attribute__((aligned(8)));
static uint8_t in_buf[IN_CAP] __attribute__((aligned(8)));

struct capsule_io rt_io = {
    .magic = CAPSULE_IO_MAGIC,
    .version = CAPSULE_IO_VERSION,
    .out_cap = OUT_CAP,
    .in_cap = IN_CAP,
};

/* Addresses are filled at run time: a static initializer with a pointer would need a relocation the
 * host would have to apply. */
static void rt_init(void) {
    rt_io.out_buf = (uint32_t)(uintptr_t)out_buf;
    rt_io.in_buf = (uint32_t)(uintptr_t)in_buf;
}

EXPORT("capsule_io") struct capsule_io *capsule_io(void) {
    rt_init();
    return &rt_io;
}

/* The allocator the host uses to place files and argument blobs before _start. */
EXPORT("capsule_alloc") void *capsule_alloc(uint32_t size) { return malloc(size ? size : 1); }
EXPORT("capsule_free") void capsule_free(void *p) { free(p); }

void rt_wait(enum capsule_io_reason reason) {
    rt_io.reason = reason;
    rt_io.yields++;
    capsule_yield();
    rt_io.reason = CAPSULE_IO_NONE;
}

/* Append one record (or as much of it as fits, then wait for the host to drain and continue). */
__attribute__((unused)) static void out_put(uint32_t fd, const uint8_t *p, size_t n) {
    rt_init();
    while (n) {
        uint32_t len = rt_io.out_len;
        uint32_t room = OUT_CAP - len;
        if (room < 16) {
            rt_wait(CAPSULE_IO_OUTPUT);
            continue;
        }
        size_t k = n < room - 8 ? n : room - 8;
        uint8_t *rec = out_buf + len;
        uint32_t hdr[2] = {fd, (uint32_t)k};
        memcpy(rec, hdr, 8);
        memcpy(rec + 8, p, k);
        size_t padded = (k + 3) & ~(size_t)3;
        memset(rec + 8 + k, 0, padded - k);
        rt_io.out_len = len + 8 + (uint32_t)padded;
        p += k;
        n -= k;
    }
}

int32_t rt_std_write(int fd, const __wasi_ciovec_t *iovs, size_t n, __wasi_size_t *written) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
#ifdef CAPSULE_HOOK /* on a hook there is no host to drain a buffer: the ring buffer (../hook/hook_rt.c) */
        rt_hook_write((uint32_t)fd, iovs[i].buf, iovs[i].buf_len);
#else
        out_put((uint32_t)fd, iovs[i].buf, iovs[i].buf_len);
#endif
        total += iovs[i].buf_len;
    }
    *written = (__wasi_size_t)total;
    if ((rt_io.flags & CAPSULE_IO_FLUSH_EACH_WRITE) && total)
        rt_wait(CAPSULE_IO_OUTPUT);
    return 0;
}

int32_t rt_std_read(const __wasi_iovec_t *iovs, size_t n, __wasi_size_t *nread) {
    rt_init();
    while (rt_io.in_pos >= rt_io.in_len && !rt_io.in_eof)
        rt_wait(CAPSULE_IO_INPUT);
    size_t got = 0;
    for (size_t i = 0; i < n && rt_io.in_pos < rt_io.in_len; i++) {
        size_t avail = rt_io.in_len - rt_io.in_pos;
        size_t k = iovs[i].buf_len < avail ? iovs[i].buf_len : avail;
        memcpy(iovs[i].buf, in_buf + rt_io.in_pos, k);
        rt_io.in_pos += (uint32_t)k;
        got += k;
    }
    *nread = (__wasi_size_t)got;
    return 0;
}

/* -- arguments and environment ----------------------------------------------------------------------- */
static int32_t blob_sizes(uint32_t count, uint32_t size, __wasi_size_t *count_out, __wasi_size_t *size_out) {
    *count_out = count;
    *size_out = size;
    return 0;
}

static int32_t blob_get(uint32_t count, uint32_t blob, uint32_t size, uint8_t **ptrs, uint8_t *buf) {
    const uint8_t *src = (const uint8_t *)(uintptr_t)blob;
    memcpy(buf, src, size);
    uint32_t at = 0;
    for (uint32_t i = 0; i < count; i++) {
        ptrs[i] = buf + at;
        while (at < size && buf[at])
            at++;
        at++;
    }
    return 0;
}

int32_t WASI(args_sizes_get)(int32_t argc, int32_t size) {
    return blob_sizes(rt_io.argc, rt_io.argv_size, (__wasi_size_t *)argc, (__wasi_size_t *)size);
}
int32_t WASI(args_get)(int32_t argv, int32_t buf) {
    return blob_get(rt_io.argc, rt_io.argv_buf, rt_io.argv_size, (uint8_t **)argv, (uint8_t *)buf);
}
int32_t WASI(environ_sizes_get)(int32_t count, int32_t size) {
    return blob_sizes(rt_io.envc, rt_io.env_size, (__wasi_size_t *)count, (__wasi_size_t *)size);
}
int32_t WASI(environ_get)(int32_t env, int32_t buf) {
    return blob_get(rt_io.envc, rt_io.env_buf, rt_io.env_size, (uint8_t **)env, (uint8_t *)buf);
}

/* -- clocks, randomness, exit, scheduling ----------------------------------------------------------- */
uint64_t rt_now(__wasi_clockid_t id) { return (uint64_t)capsule_clock_ns((int32_t)id); }

int32_t WASI(clock_res_get)(int32_t id, int32_t out) {
    if ((uint32_t)id > __WASI_CLOCKID_THREAD_CPUTIME_ID)
        return __WASI_ERRNO_INVAL;
    *(__wasi_timestamp_t *)out = 1;
    return 0;
}

int32_t WASI(clock_time_get)(int32_t id, int64_t precision, int32_t out) {
    (void)precision;
    if ((uint32_t)id > __WASI_CLOCKID_THREAD_CPUTIME_ID)
        return __WASI_ERRNO_INVAL;
    *(__wasi_timestamp_t *)out = rt_now((__wasi_clockid_t)id);
    return 0;
}

int32_t WASI(random_get)(int32_t buf, int32_t len) {
    uint8_t *p = (uint8_t *)buf;
    for (int32_t i = 0; i < len; i += 4) {
        uint32_t r = capsule_random();
        int32_t k = len - i < 4 ? len - i : 4;
        memcpy(p + i, &r, (size_t)k);
    }
    return 0;
}

_Noreturn void WASI(proc_exit)(int32_t code) {
    rt_io.exit_code = code;
    rt_io.exited = 1;
    capsule_exit(code);
}

int32_t WASI(sched_yield)(void) {
    rt_wait(CAPSULE_IO_SCHED);
    return 0;
}

/* poll_oneoff: clock subscriptions are sleeps (the guest yields until the clock passes the earliest
 * deadline, telling the host when, so it can sleep instead of spinning); descriptor subscriptions are
 * reported ready at once (memory files and the host's streams never block). */
int32_t WASI(poll_oneoff)(int32_t in, int32_t out, int32_t nsubs, int32_t nevents) {
    const __wasi_subscription_t *subs = (const __wasi_subscription_t *)in;
    __wasi_event_t *events = (__wasi_event_t *)out;
    if (nsubs <= 0)
        return __WASI_ERRNO_INVAL;
    uint32_t n = 0;
    for (int32_t i = 0; i < nsubs; i++) {
        uint8_t tag = subs[i].u.tag;
        if (tag == __WASI_EVENTTYPE_FD_READ || tag == __WASI_EVENTTYPE_FD_WRITE) {
            memset(&events[n], 0, sizeof events[n]);
            events[n].userdata = subs[i].userdata;
            events[n].type = tag;
            events[n].fd_readwrite.nbytes = tag == __WASI_EVENTTYPE_FD_READ ? rt_io.in_len - rt_io.in_pos : 0;
            n++;
        }
    }
    if (!n) {
        /* only clocks: wait for the earliest deadline (as monotonic time), then report every expired one */
        uint64_t mono = rt_now(__WASI_CLOCKID_MONOTONIC);
        uint64_t wake = UINT64_MAX;
        for (int32_t i = 0; i < nsubs; i++) {
            const __wasi_subscription_clock_t *c = &subs[i].u.u.clock;
            if (subs[i].u.tag != __WASI_EVENTTYPE_CLOCK)
                continue;
            uint64_t rel = c->timeout;
            if (c->flags & __WASI_SUBCLOCKFLAGS_SUBSCRIPTION_CLOCK_ABSTIME) {
                uint64_t now = rt_now(c->id);
                rel = c->timeout > now ? c->timeout - now : 0;
            }
            if (mono + rel < wake)
                wake = mono + rel;
        }
        while (rt_now(__WASI_CLOCKID_MONOTONIC) < wake) {
            rt_io.sleep_until = wake;
            rt_wait(CAPSULE_IO_SLEEP);
        }
        rt_io.sleep_until = 0;
        for (int32_t i = 0; i < nsubs; i++) {
            if (subs[i].u.tag != __WASI_EVENTTYPE_CLOCK)
                continue;
            memset(&events[n], 0, sizeof events[n]);
            events[n].userdata = subs[i].userdata;
            events[n].type = __WASI_EVENTTYPE_CLOCK;
            n++;
        }
    }
    *(__wasi_size_t *)nevents = n;
    return 0;
}

/* -- sockets: there are none ------------------------------------------------------------------------- */
int32_t WASI(sock_accept)(int32_t fd, int32_t flags, int32_t out) {
    (void)fd, (void)flags, (void)out;
    return __WASI_ERRNO_NOSYS;
}
int32_t WASI(sock_recv)(int32_t fd, int32_t data, int32_t len, int32_t flags, int32_t nread, int32_t oflags) {
    (void)fd, (void)data, (void)len, (void)flags, (void)nread, (void)oflags;
    return __WASI_ERRNO_NOSYS;
}
int32_t WASI(sock_send)(int32_t fd, int32_t data, int32_t len, int32_t flags, int32_t nwritten) {
    (void)fd, (void)data, (void)len, (void)flags, (void)nwritten;
    return __WASI_ERRNO_NOSYS;
}
int32_t WASI(sock_shutdown)(int32_t fd, int32_t how) {
    (void)fd, (void)how;
    return __WASI_ERRNO_NOSYS;
}
