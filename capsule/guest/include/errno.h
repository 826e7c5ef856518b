/* <errno.h> for capsule guests: wasi-libc's, with the numbers Linux programs see (issue 15.5).

wasi-libc's errno values are WASI's (ENOENT is 44; Linux's is 2): a program that prints errno, keeps it in a
file or compares it with a number from Linux would see other values than natively. Here every E* name has its
Linux value, and ``errno`` reads and writes a Linux-numbered copy that libc/errno.c keeps: each access first
moves a value wasi-libc stored since the last one over, translated (wasi-libc itself keeps storing WASI
numbers: it is compiled already). strerror, strerror_r and perror (<string.h>, <stdio.h>) print glibc's texts
for these numbers. C++ keeps wasi-libc's numbers: libc++, compiled against them, returns them in
std::error_code, which inline code compares with std::errc.

The values are Linux's (asm-generic/errno*.h); tests/wasi/test_libc.py checks them and the texts against the
host's glibc. ENOTCAPABLE, WASI's own, has no Linux number and is EACCES ("Permission denied"). */
#ifndef CAPSULE_ERRNO_H
#define CAPSULE_ERRNO_H

#include_next <errno.h>

#if !defined(__cplusplus) && !defined(CAPSULE_WASI_ERRNO)
#undef E2BIG
#define E2BIG 7
#undef EACCES
#define EACCES 13
#undef EADDRINUSE
#define EADDRINUSE 98
#undef EADDRNOTAVAIL
#define EADDRNOTAVAIL 99
#undef EAFNOSUPPORT
#define EAFNOSUPPORT 97
#undef EAGAIN
#define EAGAIN 11
#undef EALREADY
#define EALREADY 114
#undef EBADF
#define EBADF 9
#undef EBADMSG
#define EBADMSG 74
#undef EBUSY
#define EBUSY 16
#undef ECANCELED
#define ECANCELED 125
#undef ECHILD
#define ECHILD 10
#undef ECONNABORTED
#define ECONNABORTED 103
#undef ECONNREFUSED
#define ECONNREFUSED 111
#undef ECONNRESET
#define ECONNRESET 104
#undef EDEADLK
#define EDEADLK 35
#undef EDESTADDRREQ
#define EDESTADDRREQ 89
#undef EDOM
#define EDOM 33
#undef EDQUOT
#define EDQUOT 122
#undef EEXIST
#define EEXIST 17
#undef EFAULT
#define EFAULT 14
#undef EFBIG
#define EFBIG 27
#undef EHOSTUNREACH
#define EHOSTUNREACH 113
#undef EIDRM
#define EIDRM 43
#undef EILSEQ
#define EILSEQ 84
#undef EINPROGRESS
#define EINPROGRESS 115
#undef EINTR
#define EINTR 4
#undef EINVAL
#define EINVAL 22
#undef EIO
#define EIO 5
#undef EISCONN
#define EISCONN 106
#undef EISDIR
#define EISDIR 21
#undef ELOOP
#define ELOOP 40
#undef EMFILE
#define EMFILE 24
#undef EMLINK
#define EMLINK 31
#undef EMSGSIZE
#define EMSGSIZE 90
#undef EMULTIHOP
#define EMULTIHOP 72
#undef ENAMETOOLONG
#define ENAMETOOLONG 36
#undef ENETDOWN
#define ENETDOWN 100
#undef ENETRESET
#define ENETRESET 102
#undef ENETUNREACH
#define ENETUNREACH 101
#undef ENFILE
#define ENFILE 23
#undef ENOBUFS
#define ENOBUFS 105
#undef ENODEV
#define ENODEV 19
#undef ENOENT
#define ENOENT 2
#undef ENOEXEC
#define ENOEXEC 8
#undef ENOLCK
#define ENOLCK 37
#undef ENOLINK
#define ENOLINK 67
#undef ENOMEM
#define ENOMEM 12
#undef ENOMSG
#define ENOMSG 42
#undef ENOPROTOOPT
#define ENOPROTOOPT 92
#undef ENOSPC
#define ENOSPC 28
#undef ENOSYS
#define ENOSYS 38
#undef ENOTCONN
#define ENOTCONN 107
#undef ENOTDIR
#define ENOTDIR 20
#undef ENOTEMPTY
#define ENOTEMPTY 39
#undef ENOTRECOVERABLE
#define ENOTRECOVERABLE 131
#undef ENOTSOCK
#define ENOTSOCK 88
#undef ENOTSUP
#define ENOTSUP 95
#undef ENOTTY
#define ENOTTY 25
#undef ENXIO
#define ENXIO 6
#undef EOVERFLOW
#define EOVERFLOW 75
#undef EOWNERDEAD
#define EOWNERDEAD 130
#undef EPERM
#define EPERM 1
#undef EPIPE
#define EPIPE 32
#undef EPROTO
#define EPROTO 71
#undef EPROTONOSUPPORT
#define EPROTONOSUPPORT 93
#undef EPROTOTYPE
#define EPROTOTYPE 91
#undef ERANGE
#define ERANGE 34
#undef EROFS
#define EROFS 30
#undef ESPIPE
#define ESPIPE 29
#undef ESRCH
#define ESRCH 3
#undef ESTALE
#define ESTALE 116
#undef ETIMEDOUT
#define ETIMEDOUT 110
#undef ETXTBSY
#define ETXTBSY 26
#undef EXDEV
#define EXDEV 18
#undef ENOTCAPABLE
#define ENOTCAPABLE EACCES

int *__capsule_errno_location(void);
#undef errno
#define errno (*__capsule_errno_location())
#endif

#endif
