/* getpid(2) for capsule guests: a guest is a process of its own, alone in its world, and has process id 1.
 * (wasi-libc only declares getpid behind -D_WASI_EMULATED_GETPID, which capsule's toolchain always defines,
 * so that programs calling it build without flags of their own.) */
#include <unistd.h>

#define CAPSULE_PID 1

pid_t getpid(void) { return CAPSULE_PID; }
