/* What capsule's libc layer (capsule/guest/libc) gives a guest where wasi-libc has nothing: each line names a
 * call and what it returned, so the test can check the documented single-process, single-thread meanings. */
#include <errno.h>
#include <fenv.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int ran;
static void once_routine(void) { ran++; }
static void *thread_main(void *arg) { return arg; }

int main(void) {
    int a, b, c, d, e; /* each call in its own statement: the order of a printf's arguments is unspecified */
    /* processes and the shell */
    printf("getpid %d\n", (int)getpid());
    errno = 0;
    int r = system("echo hi");
    printf("system -1? %d ENOSYS? %d, system(NULL) %d\n", r == -1, errno == ENOSYS, system(NULL));
    printf("getpagesize %d\n", getpagesize());

    /* files: chmod checks the file exists, realpath resolves against the working directory */
    mkdir("dir", 0755);
    FILE *f = fopen("dir/file.txt", "w");
    fputs("data", f);
    fclose(f);
    a = chmod("dir/file.txt", 0600);
    b = chmod("nope", 0600);
    printf("chmod %d, missing %d ENOENT? %d\n", a, b, errno == ENOENT);
    char buf[PATH_MAX];
    printf("realpath %s\n", realpath("./dir//./file.txt", buf));
    char *p = realpath("dir/../dir/file.txt", NULL);
    printf("realpath %s\n", p);
    free(p);
    printf("realpath of root %s\n", realpath("/..", buf));
    errno = 0;
    printf("realpath missing %s ENOENT? %d\n", realpath("dir/none", buf) ? "found" : "NULL", errno == ENOENT);
    errno = 0;
    printf("realpath through a file %s ENOTDIR? %d\n", realpath("dir/file.txt/x", buf) ? "found" : "NULL",
           errno == ENOTDIR);

    /* threads: one thread only */
    pthread_t t;
    printf("pthread_create EAGAIN? %d\n", pthread_create(&t, NULL, thread_main, NULL) == EAGAIN);
    printf("join self EDEADLK? %d, equal %d\n", pthread_join(pthread_self(), NULL) == EDEADLK,
           pthread_equal(pthread_self(), pthread_self()));
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    a = pthread_mutex_lock(&m);
    b = pthread_mutex_trylock(&m);
    c = pthread_mutex_lock(&m);
    d = pthread_mutex_unlock(&m);
    e = pthread_mutex_unlock(&m);
    printf("mutex lock %d trylock EBUSY? %d relock EDEADLK? %d unlock %d unlock again EPERM? %d\n", a, b == EBUSY,
           c == EDEADLK, d, e == EPERM);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_t rm;
    pthread_mutex_init(&rm, &ma);
    a = pthread_mutex_lock(&rm);
    b = pthread_mutex_lock(&rm);
    c = pthread_mutex_destroy(&rm);
    d = pthread_mutex_unlock(&rm);
    e = pthread_mutex_unlock(&rm);
    printf("recursive %d %d busy-destroy EBUSY? %d unlock %d %d destroy %d\n", a, b, c == EBUSY, d, e,
           pthread_mutex_destroy(&rm));
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m);
    printf("cond signal %d wait EDEADLK? %d\n", pthread_cond_signal(&cv), pthread_cond_wait(&cv, &m) == EDEADLK);
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_nsec += 20 * 1000 * 1000;
    if (at.tv_nsec >= 1000000000L)
        at.tv_sec++, at.tv_nsec -= 1000000000L;
    printf("timedwait ETIMEDOUT? %d\n", pthread_cond_timedwait(&cv, &m, &at) == ETIMEDOUT);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    printf("waited out the deadline? %d\n", now.tv_sec > at.tv_sec || (now.tv_sec == at.tv_sec && now.tv_nsec >= at.tv_nsec));
    pthread_mutex_unlock(&m);
    pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, once_routine);
    pthread_once(&once, once_routine);
    printf("once ran %d time(s)\n", ran);
    pthread_key_t k1, k2;
    pthread_key_create(&k1, NULL);
    pthread_key_create(&k2, free);
    pthread_setspecific(k2, "two");
    printf("keys %d %s %s", k1 != k2, (char *)pthread_getspecific(k2), pthread_getspecific(k1) ? "set" : "NULL");
    a = pthread_key_delete(k1);
    printf(", delete %d, deleted set EINVAL? %d\n", a, pthread_setspecific(k1, "x") == EINVAL);
    pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    a = pthread_rwlock_rdlock(&rw);
    b = pthread_rwlock_rdlock(&rw);
    c = pthread_rwlock_wrlock(&rw);
    d = pthread_rwlock_unlock(&rw);
    e = pthread_rwlock_unlock(&rw);
    int w = pthread_rwlock_wrlock(&rw);
    printf("rwlock read %d %d write EDEADLK? %d unlock %d %d write %d tryread EBUSY? %d\n", a, b, c == EDEADLK, d, e, w,
           pthread_rwlock_tryrdlock(&rw) == EBUSY);

    /* floating-point environment: the mode names exist, only to-nearest can be set */
    a = fesetround(FE_TONEAREST);
    b = fesetround(FE_UPWARD);
    c = fesetround(FE_DOWNWARD);
    printf("fesetround nearest %d upward fails? %d downward fails? %d mode %d\n", a, b != 0, c != 0,
           fegetround() == FE_TONEAREST);

    /* wasi-libc's emulations, on without flags */
    printf("signal %d\n", signal(SIGINT, SIG_IGN) != SIG_ERR);
    struct rusage ru;
    printf("getrusage %d clock %d\n", getrusage(RUSAGE_SELF, &ru), clock() >= 0);
    void *usable = malloc(10);
    printf("malloc_usable_size >= 10? %d\n", malloc_usable_size(usable) >= 10);
    free(usable);
    return 0;
}
