/* <stdio.h> for capsule guests: wasi-libc's, with perror printing glibc's text for the Linux errno values of
 * capsule's <errno.h> (libc/errno.c). C++ keeps wasi-libc's numbers and texts. */
#ifndef CAPSULE_STDIO_H
#define CAPSULE_STDIO_H

#include_next <stdio.h>

#if !defined(__cplusplus) && !defined(CAPSULE_WASI_ERRNO)
void __capsule_perror(const char *);
#define perror __capsule_perror
#endif

#endif
