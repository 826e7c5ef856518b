/* <string.h> for capsule guests: wasi-libc's, with strerror and strerror_r giving glibc's texts for the Linux
 * errno values of capsule's <errno.h> (libc/errno.c). C++ keeps wasi-libc's numbers and texts. */
#ifndef CAPSULE_STRING_H
#define CAPSULE_STRING_H

#include_next <string.h>

#if !defined(__cplusplus) && !defined(CAPSULE_WASI_ERRNO)
char *__capsule_strerror(int);
int __capsule_strerror_r(int, char *, size_t);
#define strerror __capsule_strerror
#define strerror_r __capsule_strerror_r
#endif

#endif
