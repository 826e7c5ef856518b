/* <unistd.h> for capsule guests: wasi-libc's, plus getpagesize (hidden there with the other BSD process
 * calls; capsule/guest/libc/getpagesize.c gives what sysconf(_SC_PAGESIZE) gives: the wasm page size).
 * getpid is declared by wasi-libc itself, since capsule builds with -D_WASI_EMULATED_GETPID. */
#ifndef CAPSULE_UNISTD_H
#define CAPSULE_UNISTD_H

#include_next <unistd.h>

#if defined(_GNU_SOURCE) || defined(_BSD_SOURCE)
#ifdef __cplusplus
extern "C" {
#endif
int getpagesize(void);
#ifdef __cplusplus
}
#endif
#endif

#endif
