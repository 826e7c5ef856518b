/* Sieve of Eratosthenes up to n (at most 8,000,000): byte loads and stores in a tight loop. */
#define MAXN 8000000
static unsigned char composite[MAXN + 1];

long long run(int n) {
    if (n > MAXN) n = MAXN;
    for (int i = 0; i <= n; i++) composite[i] = 0;
    long long count = 0, sum = 0;
    for (long long i = 2; i <= n; i++) {
        if (composite[i]) continue;
        count++;
        sum += i;
        for (long long j = i * i; j <= n; j += i) composite[j] = 1;
    }
    return count * 1000000007LL + sum;
}
