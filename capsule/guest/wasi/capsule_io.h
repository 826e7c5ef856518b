/* capsule_io.h: the control block shared by the guest's WASI runtime and the host.
 *
 * The host finds it by calling the exported function capsule_io(), which returns its guest address. Every
 * field is little-endian at a fixed offset (capsule/runtime/wasi_host.py mirrors this layout; keep them in
 * step and bump CAPSULE_IO_VERSION on any change). The host reads and writes guest memory in place: under
 * the kernel the window is mapped into the host process, under wasmtime it is the module's memory.
 *
 * Protocol. The guest only ever waits by calling capsule_yield() after setting `reason`; when the call
 * returns, the host has done what the reason asks:
 *   OUTPUT  the output buffer was full: the host consumed every record and set out_len to 0;
 *   INPUT   stdin was empty: the host refilled in_buf (in_len, in_pos = 0) or set in_eof;
 *   SLEEP   the guest waits for the monotonic clock to pass sleep_until: the host may sleep until then;
 *   SCHED   sched_yield(): nothing to do.
 * The host also drains output whenever it gets control (a budget-exhausted invocation, the end of the run),
 * so output is never lost when the guest exits with a partly full buffer.
 *
 * Output is one buffer of records, in the order the guest wrote them (so stdout and stderr interleave
 * exactly): u32 fd, u32 length, `length` bytes, zero padding to a multiple of 4.
 */
#ifndef CAPSULE_IO_H
#define CAPSULE_IO_H

#include <stdint.h>

#define CAPSULE_IO_MAGIC 0x4f495343u /* "CSIO" */
#define CAPSULE_IO_VERSION 1u

enum capsule_io_reason {
    CAPSULE_IO_NONE = 0,
    CAPSULE_IO_OUTPUT = 1,
    CAPSULE_IO_INPUT = 2,
    CAPSULE_IO_SLEEP = 3,
    CAPSULE_IO_SCHED = 4,
};

/* flags (host -> guest) */
#define CAPSULE_IO_FLUSH_EACH_WRITE 1u /* yield after every write to stdout/stderr (interactive output) */

struct capsule_io {
    uint32_t magic;       /*  0 CAPSULE_IO_MAGIC */
    uint32_t version;     /*  4 CAPSULE_IO_VERSION */
    uint32_t out_buf;     /*  8 address of the output record buffer */
    uint32_t out_cap;     /* 12 its size in bytes */
    uint32_t out_len;     /* 16 bytes of records waiting (guest appends, host drains and sets 0) */
    uint32_t in_buf;      /* 20 address of the stdin buffer */
    uint32_t in_cap;      /* 24 its size */
    uint32_t in_len;      /* 28 bytes the host placed there */
    uint32_t in_pos;      /* 32 bytes the guest consumed */
    uint32_t in_eof;      /* 36 host: nothing more after in_len */
    uint32_t argc;        /* 40 host: argument count (argv[0] included) */
    uint32_t argv_buf;    /* 44 host: argc NUL-terminated strings back to back */
    uint32_t argv_size;   /* 48 host: bytes in argv_buf */
    uint32_t envc;        /* 52 host: environment count */
    uint32_t env_buf;     /* 56 host: envc "K=V" NUL-terminated strings back to back */
    uint32_t env_size;    /* 60 host: bytes in env_buf */
    uint32_t flags;       /* 64 host: CAPSULE_IO_FLUSH_EACH_WRITE, ... */
    uint32_t tty;         /* 68 host: bit fd set when the host's fd 0/1/2 is a terminal */
    int32_t exit_code;    /* 72 guest: status given to proc_exit */
    uint32_t exited;      /* 76 guest: 1 once proc_exit ran */
    uint32_t reason;      /* 80 guest: why it is yielding (enum capsule_io_reason) */
    uint32_t yields;      /* 84 guest: yields so far */
    uint64_t sleep_until; /* 88 guest: monotonic ns a SLEEP yield waits for */
};

_Static_assert(sizeof(struct capsule_io) == 96, "capsule_io layout");

#endif
