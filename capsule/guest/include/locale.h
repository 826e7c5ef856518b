/* <locale.h> for capsule guests: wasi-libc's, with a setlocale that refuses the locales a guest does not have
 * (libc/locale.c), as glibc does; wasi-libc's accepts any name. */
#ifndef CAPSULE_LOCALE_H
#define CAPSULE_LOCALE_H

#include_next <locale.h>

#if !defined(__cplusplus) && !defined(CAPSULE_WASI_SETLOCALE)
char *__capsule_setlocale(int, const char *);
#define setlocale __capsule_setlocale
#endif

#endif
