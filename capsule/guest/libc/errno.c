/* errno with Linux's numbers and strerror/perror with glibc's texts for capsule guests (see ../include/errno.h).

wasi-libc stores WASI numbers in its own ``errno``; the program's ``errno`` is ``linux_errno`` here, reached
through __capsule_errno_location. Each access moves what wasi-libc stored since the last one (its errno is
non-zero) over, translated, and clears wasi-libc's, so a later failure storing the same number is seen again;
a value the program stores stays until the library stores another. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <wasi/api.h>

#undef errno
extern _Thread_local int errno; /* wasi-libc's */

static _Thread_local int linux_errno;

/* WASI's number -> Linux's */
static const unsigned char FROM_WASI[] = {
    [__WASI_ERRNO_2BIG] = E2BIG,
    [__WASI_ERRNO_ACCES] = EACCES,
    [__WASI_ERRNO_ADDRINUSE] = EADDRINUSE,
    [__WASI_ERRNO_ADDRNOTAVAIL] = EADDRNOTAVAIL,
    [__WASI_ERRNO_AFNOSUPPORT] = EAFNOSUPPORT,
    [__WASI_ERRNO_AGAIN] = EAGAIN,
    [__WASI_ERRNO_ALREADY] = EALREADY,
    [__WASI_ERRNO_BADF] = EBADF,
    [__WASI_ERRNO_BADMSG] = EBADMSG,
    [__WASI_ERRNO_BUSY] = EBUSY,
    [__WASI_ERRNO_CANCELED] = ECANCELED,
    [__WASI_ERRNO_CHILD] = ECHILD,
    [__WASI_ERRNO_CONNABORTED] = ECONNABORTED,
    [__WASI_ERRNO_CONNREFUSED] = ECONNREFUSED,
    [__WASI_ERRNO_CONNRESET] = ECONNRESET,
    [__WASI_ERRNO_DEADLK] = EDEADLK,
    [__WASI_ERRNO_DESTADDRREQ] = EDESTADDRREQ,
    [__WASI_ERRNO_DOM] = EDOM,
    [__WASI_ERRNO_DQUOT] = EDQUOT,
    [__WASI_ERRNO_EXIST] = EEXIST,
    [__WASI_ERRNO_FAULT] = EFAULT,
    [__WASI_ERRNO_FBIG] = EFBIG,
    [__WASI_ERRNO_HOSTUNREACH] = EHOSTUNREACH,
    [__WASI_ERRNO_IDRM] = EIDRM,
    [__WASI_ERRNO_ILSEQ] = EILSEQ,
    [__WASI_ERRNO_INPROGRESS] = EINPROGRESS,
    [__WASI_ERRNO_INTR] = EINTR,
    [__WASI_ERRNO_INVAL] = EINVAL,
    [__WASI_ERRNO_IO] = EIO,
    [__WASI_ERRNO_ISCONN] = EISCONN,
    [__WASI_ERRNO_ISDIR] = EISDIR,
    [__WASI_ERRNO_LOOP] = ELOOP,
    [__WASI_ERRNO_MFILE] = EMFILE,
    [__WASI_ERRNO_MLINK] = EMLINK,
    [__WASI_ERRNO_MSGSIZE] = EMSGSIZE,
    [__WASI_ERRNO_MULTIHOP] = EMULTIHOP,
    [__WASI_ERRNO_NAMETOOLONG] = ENAMETOOLONG,
    [__WASI_ERRNO_NETDOWN] = ENETDOWN,
    [__WASI_ERRNO_NETRESET] = ENETRESET,
    [__WASI_ERRNO_NETUNREACH] = ENETUNREACH,
    [__WASI_ERRNO_NFILE] = ENFILE,
    [__WASI_ERRNO_NOBUFS] = ENOBUFS,
    [__WASI_ERRNO_NODEV] = ENODEV,
    [__WASI_ERRNO_NOENT] = ENOENT,
    [__WASI_ERRNO_NOEXEC] = ENOEXEC,
    [__WASI_ERRNO_NOLCK] = ENOLCK,
    [__WASI_ERRNO_NOLINK] = ENOLINK,
    [__WASI_ERRNO_NOMEM] = ENOMEM,
    [__WASI_ERRNO_NOMSG] = ENOMSG,
    [__WASI_ERRNO_NOPROTOOPT] = ENOPROTOOPT,
    [__WASI_ERRNO_NOSPC] = ENOSPC,
    [__WASI_ERRNO_NOSYS] = ENOSYS,
    [__WASI_ERRNO_NOTCONN] = ENOTCONN,
    [__WASI_ERRNO_NOTDIR] = ENOTDIR,
    [__WASI_ERRNO_NOTEMPTY] = ENOTEMPTY,
    [__WASI_ERRNO_NOTRECOVERABLE] = ENOTRECOVERABLE,
    [__WASI_ERRNO_NOTSOCK] = ENOTSOCK,
    [__WASI_ERRNO_NOTSUP] = ENOTSUP,
    [__WASI_ERRNO_NOTTY] = ENOTTY,
    [__WASI_ERRNO_NXIO] = ENXIO,
    [__WASI_ERRNO_OVERFLOW] = EOVERFLOW,
    [__WASI_ERRNO_OWNERDEAD] = EOWNERDEAD,
    [__WASI_ERRNO_PERM] = EPERM,
    [__WASI_ERRNO_PIPE] = EPIPE,
    [__WASI_ERRNO_PROTO] = EPROTO,
    [__WASI_ERRNO_PROTONOSUPPORT] = EPROTONOSUPPORT,
    [__WASI_ERRNO_PROTOTYPE] = EPROTOTYPE,
    [__WASI_ERRNO_RANGE] = ERANGE,
    [__WASI_ERRNO_ROFS] = EROFS,
    [__WASI_ERRNO_SPIPE] = ESPIPE,
    [__WASI_ERRNO_SRCH] = ESRCH,
    [__WASI_ERRNO_STALE] = ESTALE,
    [__WASI_ERRNO_TIMEDOUT] = ETIMEDOUT,
    [__WASI_ERRNO_TXTBSY] = ETXTBSY,
    [__WASI_ERRNO_XDEV] = EXDEV,
    [__WASI_ERRNO_NOTCAPABLE] = ENOTCAPABLE,
};

/* glibc's text for each Linux number (none for the numbers Linux leaves unused) */
static const char *const TEXTS[] = {
    [0] = "Success",
    [1] = "Operation not permitted",
    [2] = "No such file or directory",
    [3] = "No such process",
    [4] = "Interrupted system call",
    [5] = "Input/output error",
    [6] = "No such device or address",
    [7] = "Argument list too long",
    [8] = "Exec format error",
    [9] = "Bad file descriptor",
    [10] = "No child processes",
    [11] = "Resource temporarily unavailable",
    [12] = "Cannot allocate memory",
    [13] = "Permission denied",
    [14] = "Bad address",
    [15] = "Block device required",
    [16] = "Device or resource busy",
    [17] = "File exists",
    [18] = "Invalid cross-device link",
    [19] = "No such device",
    [20] = "Not a directory",
    [21] = "Is a directory",
    [22] = "Invalid argument",
    [23] = "Too many open files in system",
    [24] = "Too many open files",
    [25] = "Inappropriate ioctl for device",
    [26] = "Text file busy",
    [27] = "File too large",
    [28] = "No space left on device",
    [29] = "Illegal seek",
    [30] = "Read-only file system",
    [31] = "Too many links",
    [32] = "Broken pipe",
    [33] = "Numerical argument out of domain",
    [34] = "Numerical result out of range",
    [35] = "Resource deadlock avoided",
    [36] = "File name too long",
    [37] = "No locks available",
    [38] = "Function not implemented",
    [39] = "Directory not empty",
    [40] = "Too many levels of symbolic links",
    [42] = "No message of desired type",
    [43] = "Identifier removed",
    [44] = "Channel number out of range",
    [45] = "Level 2 not synchronized",
    [46] = "Level 3 halted",
    [47] = "Level 3 reset",
    [48] = "Link number out of range",
    [49] = "Protocol driver not attached",
    [50] = "No CSI structure available",
    [51] = "Level 2 halted",
    [52] = "Invalid exchange",
    [53] = "Invalid request descriptor",
    [54] = "Exchange full",
    [55] = "No anode",
    [56] = "Invalid request code",
    [57] = "Invalid slot",
    [59] = "Bad font file format",
    [60] = "Device not a stream",
    [61] = "No data available",
    [62] = "Timer expired",
    [63] = "Out of streams resources",
    [64] = "Machine is not on the network",
    [65] = "Package not installed",
    [66] = "Object is remote",
    [67] = "Link has been severed",
    [68] = "Advertise error",
    [69] = "Srmount error",
    [70] = "Communication error on send",
    [71] = "Protocol error",
    [72] = "Multihop attempted",
    [73] = "RFS specific error",
    [74] = "Bad message",
    [75] = "Value too large for defined data type",
    [76] = "Name not unique on network",
    [77] = "File descriptor in bad state",
    [78] = "Remote address changed",
    [79] = "Can not access a needed shared library",
    [80] = "Accessing a corrupted shared library",
    [81] = ".lib section in a.out corrupted",
    [82] = "Attempting to link in too many shared libraries",
    [83] = "Cannot exec a shared library directly",
    [84] = "Invalid or incomplete multibyte or wide character",
    [85] = "Interrupted system call should be restarted",
    [86] = "Streams pipe error",
    [87] = "Too many users",
    [88] = "Socket operation on non-socket",
    [89] = "Destination address required",
    [90] = "Message too long",
    [91] = "Protocol wrong type for socket",
    [92] = "Protocol not available",
    [93] = "Protocol not supported",
    [94] = "Socket type not supported",
    [95] = "Operation not supported",
    [96] = "Protocol family not supported",
    [97] = "Address family not supported by protocol",
    [98] = "Address already in use",
    [99] = "Cannot assign requested address",
    [100] = "Network is down",
    [101] = "Network is unreachable",
    [102] = "Network dropped connection on reset",
    [103] = "Software caused connection abort",
    [104] = "Connection reset by peer",
    [105] = "No buffer space available",
    [106] = "Transport endpoint is already connected",
    [107] = "Transport endpoint is not connected",
    [108] = "Cannot send after transport endpoint shutdown",
    [109] = "Too many references: cannot splice",
    [110] = "Connection timed out",
    [111] = "Connection refused",
    [112] = "Host is down",
    [113] = "No route to host",
    [114] = "Operation already in progress",
    [115] = "Operation now in progress",
    [116] = "Stale file handle",
    [117] = "Structure needs cleaning",
    [118] = "Not a XENIX named type file",
    [119] = "No XENIX semaphores available",
    [120] = "Is a named type file",
    [121] = "Remote I/O error",
    [122] = "Disk quota exceeded",
    [123] = "No medium found",
    [124] = "Wrong medium type",
    [125] = "Operation canceled",
    [126] = "Required key not available",
    [127] = "Key has expired",
    [128] = "Key has been revoked",
    [129] = "Key was rejected by service",
    [130] = "Owner died",
    [131] = "State not recoverable",
    [132] = "Operation not possible due to RF-kill",
    [133] = "Memory page has hardware error",
};

int *__capsule_errno_location(void) {
    int raw = errno;
    if (raw != 0) {
        linux_errno = raw > 0 && (size_t)raw < sizeof FROM_WASI && FROM_WASI[raw] ? FROM_WASI[raw] : EINVAL;
        errno = 0;
    }
    return &linux_errno;
}

/* "Unknown error N", as glibc words a number it has no text for */
static const char *unknown(int e, char *buf, size_t len) {
    snprintf(buf, len, "Unknown error %d", e);
    return buf;
}

static const char *text(int e, char *buf, size_t len) {
    if (e >= 0 && (size_t)e < sizeof TEXTS / sizeof TEXTS[0] && TEXTS[e])
        return TEXTS[e];
    return unknown(e, buf, len);
}

char *__capsule_strerror(int e) {
    static char buf[32];
    return (char *)text(e, buf, sizeof buf);
}

/* the XSI strerror_r, which <string.h> declares (0, or ERANGE when the text does not fit) */
int __capsule_strerror_r(int e, char *buf, size_t len) {
    char tmp[32];
    const char *t = text(e, tmp, sizeof tmp);
    size_t n = strlen(t);
    if (len == 0)
        return ERANGE;
    if (n >= len) {
        memcpy(buf, t, len - 1);
        buf[len - 1] = '\0';
        return ERANGE;
    }
    memcpy(buf, t, n + 1);
    return 0;
}

void __capsule_perror(const char *s) {
    const char *t = __capsule_strerror(*__capsule_errno_location());
    if (s && *s)
        fprintf(stderr, "%s: %s\n", s, t);
    else
        fprintf(stderr, "%s\n", t);
}

/* wasi-libc's stdio asks __isatty whether stdout is a terminal before its first write, and __isatty stores
 * ENOTTY when it is not: a program's errno would change under a printf, which glibc's never does. The link
 * wraps the internal name (-Wl,--wrap=__isatty, capsule.toolchain.guest), so stdio's question leaves errno
 * as it was; the program's own isatty (another name for the same function) still stores ENOTTY. */
int __real___isatty(int fd);

int __wrap___isatty(int fd) {
    int saved = errno;
    int r = __real___isatty(fd);
    if (!r)
        errno = saved;
    return r;
}
