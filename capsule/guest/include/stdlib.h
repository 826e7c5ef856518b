/* <stdlib.h> for capsule guests: wasi-libc's, plus what it leaves out and capsule/guest/libc provides.
 *
 * realpath: wasi-libc hides it ("WASI has no absolute paths"); a capsule guest has one file system with a root,
 * so paths resolve against the working directory as anywhere else (libc/realpath.c). system: declared by
 * wasi-libc but never defined; capsule's returns -1 with errno ENOSYS (there is no shell), and 0 for
 * system(NULL) ("no command processor"). malloc_usable_size: wasi-libc's allocator has it, declared only in
 * <malloc.h>, which programs include on Linux alone (QuickJS does, and calls it everywhere else too). */
#ifndef CAPSULE_STDLIB_H
#define CAPSULE_STDLIB_H

#include_next <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif
size_t malloc_usable_size(void *);
#ifdef __cplusplus
}
#endif

#if defined(_XOPEN_SOURCE) || defined(_GNU_SOURCE) || defined(_BSD_SOURCE)
#ifdef __cplusplus
extern "C" {
#endif
char *realpath(const char *__restrict, char *__restrict);
#ifdef __cplusplus
}
#endif
#endif

#endif
