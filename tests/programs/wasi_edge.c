/* Calls with no native counterpart to compare with: unsupported calls give ENOSYS, a closed stdout gives
 * EBADF, random bytes, sched_yield, and the exported host interface of capsule.h. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "capsule.h"

int main(void) {
    errno = 0;
    int r = link("a", "b");
    printf("link %d %s\n", r, errno == ENOSYS ? "ENOSYS" : "other");
    errno = 0;
    r = symlink("a", "b");
    printf("symlink %d %s\n", r, errno == ENOSYS ? "ENOSYS" : "other");
    unsigned char buf[64];
    memset(buf, 0, sizeof buf);
    r = getentropy(buf, sizeof buf);
    int nonzero = 0;
    for (unsigned i = 0; i < sizeof buf; i++)
        nonzero += buf[i] != 0;
    printf("getentropy %d nonzero %s\n", r, nonzero > 32 ? "most" : "few");
    printf("sched_yield %d\n", sched_yield());
    long long t0 = capsule_clock_ns(1);
    capsule_yield();
    printf("capsule_yield returns, clock forward %d\n", capsule_clock_ns(1) >= t0);
    fflush(stdout);
    fprintf(stderr, "closing stdout\n");
    close(1);
    errno = 0;
    r = (int)write(1, "lost\n", 5);
    fprintf(stderr, "write to closed stdout %d %s\n", r, errno == EBADF ? "EBADF" : "other");
    return 0;
}
