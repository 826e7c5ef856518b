/* runtime.h: what the pieces of capsule's guest WASI runtime share (not part of any public interface). */
#ifndef CAPSULE_RUNTIME_H
#define CAPSULE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <wasi/api.h>

#include "../crt/capsule.h"
#include "capsule_io.h"

/* The WASI entry points wasi-libc calls. Defining them here resolves libc's references inside the module,
 * so the program imports nothing from wasi_snapshot_preview1: only the four capsule intrinsics remain. */
#define WASI(name) __imported_wasi_snapshot_preview1_##name
#define EXPORT(name) __attribute__((export_name(name), used))

extern struct capsule_io rt_io;
struct capsule_io *capsule_io(void);

/* stdio (wasi_io.c) */
int32_t rt_std_write(int fd, const __wasi_ciovec_t *iovs, size_t n, __wasi_size_t *written);
int32_t rt_std_read(const __wasi_iovec_t *iovs, size_t n, __wasi_size_t *nread);
void rt_wait(enum capsule_io_reason reason);
void rt_hook_write(uint32_t fd, const uint8_t *p, size_t n); /* hook builds: to the ring buffer */
uint64_t rt_now(__wasi_clockid_t id);

#endif
