/* <sys/stat.h> for capsule guests: wasi-libc's, plus the chmod family it leaves out ("WASI has no chmod").
 *
 * The guest's in-memory file system keeps no permission bits, so capsule/guest/libc/chmod.c checks that the
 * file exists (and fails as stat would: ENOENT, ENOTDIR, EBADF) and otherwise succeeds without effect: a
 * program that sets a mode and reads the file back works, and `stat` keeps reporting what it did before. */
#ifndef CAPSULE_SYS_STAT_H
#define CAPSULE_SYS_STAT_H

#include_next <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif
int chmod(const char *, mode_t);
int fchmod(int, mode_t);
int fchmodat(int, const char *, mode_t, int);
#ifdef __cplusplus
}
#endif

#endif
