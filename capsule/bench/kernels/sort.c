/* Quicksort (median of three, insertion sort below 16) of n pseudo-random ints (at most 4M): compares,
 * swaps and recursion. */
#define MAXN (4 << 20)
static int a[MAXN];

static void insertion(int *v, int n) {
    for (int i = 1; i < n; i++) {
        int x = v[i], j = i;
        while (j > 0 && v[j - 1] > x) { v[j] = v[j - 1]; j--; }
        v[j] = x;
    }
}

static void quicksort(int *v, int n) {
    while (n > 16) {
        int m = n / 2, t;
        if (v[m] < v[0]) { t = v[m]; v[m] = v[0]; v[0] = t; }
        if (v[n - 1] < v[m]) { t = v[n - 1]; v[n - 1] = v[m]; v[m] = t; }
        if (v[m] < v[0]) { t = v[m]; v[m] = v[0]; v[0] = t; }
        int p = v[m], i = 0, j = n - 1;
        for (;;) {
            while (v[i] < p) i++;
            while (v[j] > p) j--;
            if (i >= j) break;
            t = v[i]; v[i] = v[j]; v[j] = t;
            i++; j--;
        }
        if (j + 1 < n - j - 1) { quicksort(v, j + 1); v += j + 1; n -= j + 1; }
        else { quicksort(v + j + 1, n - j - 1); n = j + 1; }
    }
    insertion(v, n);
}

long long run(int n) {
    if (n > MAXN) n = MAXN;
    unsigned seed = 42;
    for (int i = 0; i < n; i++) { seed = seed * 1664525u + 1013904223u; a[i] = (int)(seed >> 1); }
    quicksort(a, n);
    long long h = 0;
    for (int i = 0; i < n; i++) {
        if (i && a[i - 1] > a[i]) return -1;
        h = h * 31 + a[i];
    }
    return h;
}
