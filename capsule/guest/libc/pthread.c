/* POSIX threads for a guest that has exactly one thread (see ../include/pthread.h for what each call means).
 *
 * Every object keeps its state in the words of wasi-libc's (musl's) opaque types, so programs that embed them
 * keep their layout: a mutex is (type, hold count), a read-write lock (readers, writer), a condition variable
 * its clock, an attribute object its fields in order. Nothing here waits for another thread, because there is
 * none: where POSIX would block forever the call returns EDEADLK, and a timed wait sleeps out its timeout. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static char the_thread; /* its address is the one thread's pthread_t */

#define MUTEX_TYPE(m) ((m)->__u.__i[0])
#define MUTEX_COUNT(m) ((m)->__u.__i[1])
#define RW_READERS(l) ((l)->__u.__i[0])
#define RW_WRITER(l) ((l)->__u.__i[1])
#define COND_CLOCK(c) ((c)->__u.__i[0]) /* CLOCK_BY_REALTIME or CLOCK_BY_MONOTONIC (clockid_t is a pointer) */
#define ATTR_DETACH(a) ((a)->__u.__i[0])
#define ATTR_STACK(a) ((a)->__u.__s[1])
#define ATTR_GUARD(a) ((a)->__u.__s[2])
#define ATTR_SCOPE(a) ((a)->__u.__i[3])
#define TYPE_MASK 3u
#define PSHARED_BIT 0x80000000u
enum { CLOCK_BY_REALTIME = 0, CLOCK_BY_MONOTONIC = 1 };

static clockid_t clock_of(unsigned by) { return by == CLOCK_BY_MONOTONIC ? CLOCK_MONOTONIC : CLOCK_REALTIME; }

/* -- threads ------------------------------------------------------------------------------------------------ */
int pthread_create(pthread_t *restrict thread, const pthread_attr_t *restrict attr, void *(*start)(void *),
                   void *restrict arg) {
    (void)thread, (void)attr, (void)start, (void)arg;
    return EAGAIN; /* the guest cannot run a second thread */
}

pthread_t pthread_self(void) { return (pthread_t)(void *)&the_thread; }

int pthread_equal(pthread_t a, pthread_t b) { return a == b; }

int pthread_join(pthread_t thread, void **result) {
    (void)result;
    return pthread_equal(thread, pthread_self()) ? EDEADLK : ESRCH;
}

int pthread_detach(pthread_t thread) { return pthread_equal(thread, pthread_self()) ? 0 : ESRCH; }

_Noreturn void pthread_exit(void *result) {
    (void)result;
    exit(0); /* the last thread ending ends the process with status 0 */
}

int pthread_cancel(pthread_t thread) { return pthread_equal(thread, pthread_self()) ? 0 : ESRCH; }

static int cancel_state, cancel_type;

int pthread_setcancelstate(int state, int *old) {
    if (state != PTHREAD_CANCEL_ENABLE && state != PTHREAD_CANCEL_DISABLE)
        return EINVAL;
    if (old)
        *old = cancel_state;
    cancel_state = state;
    return 0;
}

int pthread_setcanceltype(int type, int *old) {
    if (type != PTHREAD_CANCEL_DEFERRED && type != PTHREAD_CANCEL_ASYNCHRONOUS)
        return EINVAL;
    if (old)
        *old = cancel_type;
    cancel_type = type;
    return 0;
}

void pthread_testcancel(void) {}

int pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
    (void)prepare, (void)parent, (void)child;
    return 0; /* the guest never forks */
}

static int concurrency;
int pthread_getconcurrency(void) { return concurrency; }
int pthread_setconcurrency(int level) {
    if (level < 0)
        return EINVAL;
    concurrency = level;
    return 0;
}

int pthread_attr_init(pthread_attr_t *a) {
    *a = (pthread_attr_t){0};
    return 0;
}
int pthread_attr_destroy(pthread_attr_t *a) {
    (void)a;
    return 0;
}
int pthread_attr_getdetachstate(const pthread_attr_t *a, int *state) {
    *state = ATTR_DETACH(a);
    return 0;
}
int pthread_attr_setdetachstate(pthread_attr_t *a, int state) {
    if (state != PTHREAD_CREATE_JOINABLE && state != PTHREAD_CREATE_DETACHED)
        return EINVAL;
    ATTR_DETACH(a) = state;
    return 0;
}
int pthread_attr_getstacksize(const pthread_attr_t *restrict a, size_t *restrict size) {
    *size = ATTR_STACK(a);
    return 0;
}
int pthread_attr_setstacksize(pthread_attr_t *a, size_t size) {
    if (size < PTHREAD_STACK_MIN)
        return EINVAL;
    ATTR_STACK(a) = size;
    return 0;
}
int pthread_attr_getguardsize(const pthread_attr_t *restrict a, size_t *restrict size) {
    *size = ATTR_GUARD(a);
    return 0;
}
int pthread_attr_setguardsize(pthread_attr_t *a, size_t size) {
    ATTR_GUARD(a) = size;
    return 0;
}
int pthread_attr_getscope(const pthread_attr_t *restrict a, int *restrict scope) {
    *scope = ATTR_SCOPE(a);
    return 0;
}
int pthread_attr_setscope(pthread_attr_t *a, int scope) {
    if (scope == PTHREAD_SCOPE_PROCESS)
        return ENOTSUP;
    if (scope != PTHREAD_SCOPE_SYSTEM)
        return EINVAL;
    ATTR_SCOPE(a) = scope;
    return 0;
}

/* Sleep until the absolute time `at` on `clock`: what a timed wait for another thread comes to. */
static int wait_out(clockid_t clock, const struct timespec *at) {
    if (at->tv_nsec < 0 || at->tv_nsec >= 1000000000L)
        return EINVAL;
    while (clock_nanosleep(clock, TIMER_ABSTIME, at, NULL) == EINTR)
        ;
    return ETIMEDOUT;
}

/* -- mutexes ------------------------------------------------------------------------------------------------ */
int pthread_mutexattr_init(pthread_mutexattr_t *a) {
    a->__attr = PTHREAD_MUTEX_DEFAULT;
    return 0;
}
int pthread_mutexattr_destroy(pthread_mutexattr_t *a) {
    (void)a;
    return 0;
}
int pthread_mutexattr_gettype(const pthread_mutexattr_t *restrict a, int *restrict type) {
    *type = (int)(a->__attr & TYPE_MASK);
    return 0;
}
int pthread_mutexattr_settype(pthread_mutexattr_t *a, int type) {
    if (type < PTHREAD_MUTEX_NORMAL || type > PTHREAD_MUTEX_ERRORCHECK)
        return EINVAL;
    a->__attr = (a->__attr & ~TYPE_MASK) | (unsigned)type;
    return 0;
}
int pthread_mutexattr_getpshared(const pthread_mutexattr_t *restrict a, int *restrict pshared) {
    *pshared = a->__attr & PSHARED_BIT ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE;
    return 0;
}
int pthread_mutexattr_setpshared(pthread_mutexattr_t *a, int pshared) {
    if (pshared != PTHREAD_PROCESS_PRIVATE && pshared != PTHREAD_PROCESS_SHARED)
        return EINVAL;
    a->__attr = pshared ? a->__attr | PSHARED_BIT : a->__attr & ~PSHARED_BIT;
    return 0;
}

int pthread_mutex_init(pthread_mutex_t *restrict m, const pthread_mutexattr_t *restrict a) {
    *m = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    MUTEX_TYPE(m) = a ? (int)(a->__attr & TYPE_MASK) : PTHREAD_MUTEX_DEFAULT;
    return 0;
}
int pthread_mutex_destroy(pthread_mutex_t *m) { return MUTEX_COUNT(m) ? EBUSY : 0; }

int pthread_mutex_trylock(pthread_mutex_t *m) {
    if (MUTEX_COUNT(m) == 0) {
        MUTEX_COUNT(m) = 1;
        return 0;
    }
    if (MUTEX_TYPE(m) != PTHREAD_MUTEX_RECURSIVE)
        return EBUSY;
    if (MUTEX_COUNT(m) == INT_MAX)
        return EAGAIN;
    MUTEX_COUNT(m)++;
    return 0;
}
int pthread_mutex_lock(pthread_mutex_t *m) {
    int r = pthread_mutex_trylock(m);
    return r == EBUSY ? EDEADLK : r; /* held by the only thread: it would wait for itself */
}
int pthread_mutex_timedlock(pthread_mutex_t *restrict m, const struct timespec *restrict at) {
    int r = pthread_mutex_trylock(m);
    return r == EBUSY ? wait_out(CLOCK_REALTIME, at) : r;
}
int pthread_mutex_unlock(pthread_mutex_t *m) {
    if (MUTEX_COUNT(m) == 0)
        return EPERM;
    MUTEX_COUNT(m)--;
    return 0;
}

/* -- condition variables ------------------------------------------------------------------------------------ */
int pthread_condattr_init(pthread_condattr_t *a) {
    a->__attr = CLOCK_BY_REALTIME;
    return 0;
}
int pthread_condattr_destroy(pthread_condattr_t *a) {
    (void)a;
    return 0;
}
int pthread_condattr_getclock(const pthread_condattr_t *restrict a, clockid_t *restrict clock) {
    *clock = clock_of(a->__attr & ~PSHARED_BIT);
    return 0;
}
int pthread_condattr_setclock(pthread_condattr_t *a, clockid_t clock) {
    if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC)
        return EINVAL;
    a->__attr = (a->__attr & PSHARED_BIT) | (clock == CLOCK_MONOTONIC ? CLOCK_BY_MONOTONIC : CLOCK_BY_REALTIME);
    return 0;
}
int pthread_condattr_getpshared(const pthread_condattr_t *restrict a, int *restrict pshared) {
    *pshared = a->__attr & PSHARED_BIT ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE;
    return 0;
}
int pthread_condattr_setpshared(pthread_condattr_t *a, int pshared) {
    if (pshared != PTHREAD_PROCESS_PRIVATE && pshared != PTHREAD_PROCESS_SHARED)
        return EINVAL;
    a->__attr = pshared ? a->__attr | PSHARED_BIT : a->__attr & ~PSHARED_BIT;
    return 0;
}

int pthread_cond_init(pthread_cond_t *restrict c, const pthread_condattr_t *restrict a) {
    *c = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    COND_CLOCK(c) = a ? (int)(a->__attr & ~PSHARED_BIT) : CLOCK_BY_REALTIME;
    return 0;
}
int pthread_cond_destroy(pthread_cond_t *c) {
    (void)c;
    return 0;
}
int pthread_cond_signal(pthread_cond_t *c) {
    (void)c;
    return 0; /* nobody waits */
}
int pthread_cond_broadcast(pthread_cond_t *c) {
    (void)c;
    return 0;
}
int pthread_cond_wait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m) {
    (void)c;
    return MUTEX_COUNT(m) ? EDEADLK : EPERM; /* no other thread exists to signal it */
}
int pthread_cond_timedwait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m, const struct timespec *restrict at) {
    if (!MUTEX_COUNT(m))
        return EPERM;
    return wait_out(clock_of((unsigned)COND_CLOCK(c)), at);
}

/* -- read-write locks ----------------------------------------------------------------------------------------- */
int pthread_rwlockattr_init(pthread_rwlockattr_t *a) {
    *a = (pthread_rwlockattr_t){0};
    return 0;
}
int pthread_rwlockattr_destroy(pthread_rwlockattr_t *a) {
    (void)a;
    return 0;
}
int pthread_rwlock_init(pthread_rwlock_t *restrict l, const pthread_rwlockattr_t *restrict a) {
    (void)a;
    *l = (pthread_rwlock_t)PTHREAD_RWLOCK_INITIALIZER;
    return 0;
}
int pthread_rwlock_destroy(pthread_rwlock_t *l) { return RW_READERS(l) || RW_WRITER(l) ? EBUSY : 0; }
int pthread_rwlock_tryrdlock(pthread_rwlock_t *l) {
    if (RW_WRITER(l))
        return EBUSY;
    if (RW_READERS(l) == INT_MAX)
        return EAGAIN;
    RW_READERS(l)++;
    return 0;
}
int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    int r = pthread_rwlock_tryrdlock(l);
    return r == EBUSY ? EDEADLK : r;
}
int pthread_rwlock_trywrlock(pthread_rwlock_t *l) {
    if (RW_WRITER(l) || RW_READERS(l))
        return EBUSY;
    RW_WRITER(l) = 1;
    return 0;
}
int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    int r = pthread_rwlock_trywrlock(l);
    return r == EBUSY ? EDEADLK : r;
}
int pthread_rwlock_unlock(pthread_rwlock_t *l) {
    if (RW_WRITER(l)) {
        RW_WRITER(l) = 0;
        return 0;
    }
    if (!RW_READERS(l))
        return EPERM;
    RW_READERS(l)--;
    return 0;
}

/* -- spin locks ----------------------------------------------------------------------------------------------- */
int pthread_spin_init(pthread_spinlock_t *s, int pshared) {
    (void)pshared;
    *s = 0;
    return 0;
}
int pthread_spin_destroy(pthread_spinlock_t *s) { return *s ? EBUSY : 0; }
int pthread_spin_trylock(pthread_spinlock_t *s) {
    if (*s)
        return EBUSY;
    *s = 1;
    return 0;
}
int pthread_spin_lock(pthread_spinlock_t *s) { return *s ? EDEADLK : pthread_spin_trylock(s); }
int pthread_spin_unlock(pthread_spinlock_t *s) {
    *s = 0;
    return 0;
}

/* -- once and keys -------------------------------------------------------------------------------------------- */
enum { ONCE_NEVER = 0, ONCE_RUNNING = 1, ONCE_DONE = 2 };

int pthread_once(pthread_once_t *once, void (*routine)(void)) {
    if (*once == ONCE_NEVER) {
        *once = ONCE_RUNNING; /* a routine that calls pthread_once on itself returns at once, not forever */
        routine();
        *once = ONCE_DONE;
    }
    return 0;
}

static struct {
    unsigned char used;
    void (*destructor)(void *);
    const void *value;
} keys[PTHREAD_KEYS_MAX];

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *)) {
    for (unsigned i = 0; i < PTHREAD_KEYS_MAX; i++) {
        if (!keys[i].used) {
            keys[i].used = 1;
            keys[i].destructor = destructor; /* kept for the record: the one thread ends only with the process */
            keys[i].value = NULL;
            *key = i;
            return 0;
        }
    }
    return EAGAIN;
}
int pthread_key_delete(pthread_key_t key) {
    if (key >= PTHREAD_KEYS_MAX || !keys[key].used)
        return EINVAL;
    keys[key].used = 0;
    return 0;
}
void *pthread_getspecific(pthread_key_t key) {
    return key < PTHREAD_KEYS_MAX && keys[key].used ? (void *)keys[key].value : NULL;
}
int pthread_setspecific(pthread_key_t key, const void *value) {
    if (key >= PTHREAD_KEYS_MAX || !keys[key].used)
        return EINVAL;
    keys[key].value = value;
    return 0;
}
