/* Clocks and sleeping: results are printed as properties, so native and guest runs agree. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(void) {
    time_t now = time(NULL);
    printf("time after 2024: %d\n", now > 1704067200);
    long long real = ns(CLOCK_REALTIME);
    printf("realtime agrees with time(): %d\n", real / 1000000000LL - now <= 1);
    long long m0 = ns(CLOCK_MONOTONIC);
    struct timespec req = {0, 30 * 1000000};
    nanosleep(&req, NULL);
    long long m1 = ns(CLOCK_MONOTONIC);
    printf("nanosleep 30ms took >= 30ms: %d, < 2s: %d\n", m1 - m0 >= 30000000LL, m1 - m0 < 2000000000LL);
    usleep(10000);
    long long m2 = ns(CLOCK_MONOTONIC);
    printf("usleep 10ms: %d\n", m2 - m1 >= 10000000LL);
    struct timespec res;
    printf("clock_getres ok: %d\n", clock_getres(CLOCK_MONOTONIC, &res) == 0 && res.tv_sec == 0 && res.tv_nsec > 0);
    volatile unsigned x = 0;
    for (unsigned i = 0; i < 3000000; i++)
        x += i;
    printf("cpu clock advances: %d\n", ns(CLOCK_PROCESS_CPUTIME_ID) > 0);
    time_t fixed = 1700000000;
    struct tm tm;
    gmtime_r(&fixed, &tm);
    char buf[64];
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %a %b %j", &tm);
    printf("gmtime %s wday %d yday %d\n", buf, tm.tm_wday, tm.tm_yday);
    tm.tm_mday += 40;
    time_t later = timegm(&tm);
    printf("timegm +40 days %lld\n", (long long)later);
    return 0;
}
