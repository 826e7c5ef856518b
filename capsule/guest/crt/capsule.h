/* capsule.h: what a guest program may ask of capsule directly, beyond WASI.
 *
 * These four functions are imported from the module "capsule"; the capsule compiler lowers each call inline
 * (no host call): yield suspends the invocation so the host can serve I/O and then resumes exactly here;
 * exit ends the run with a status; clock_ns reads a kernel clock; random gives 32 random bits. Any other
 * import is refused when the program is built, so this header is the whole contract. Under wasmtime (the
 * differential reference) the host supplies the same four functions.
 */
#ifndef CAPSULE_H
#define CAPSULE_H

#include <stdint.h>

#define CAPSULE_IMPORT(name) __attribute__((import_module("capsule"), import_name(name)))

/* Suspend until the host has served I/O (drained output, refilled input, or waited for a clock). */
CAPSULE_IMPORT("yield") void capsule_yield(void);
/* End the current run now with this exit status; never returns. */
CAPSULE_IMPORT("exit") _Noreturn void capsule_exit(int32_t code);
/* Nanoseconds of clock id: 0 realtime, 1 monotonic, 2 process cputime, 3 thread cputime. */
CAPSULE_IMPORT("clock_ns") int64_t capsule_clock_ns(int32_t id);
/* 32 random bits from the kernel's prandom generator. */
CAPSULE_IMPORT("random") uint32_t capsule_random(void);

#endif
