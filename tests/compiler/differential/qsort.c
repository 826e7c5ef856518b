/* A generic qsort (median of three, insertion sort for short ranges, recursion on the smaller side) with
 * comparators called through function pointers, over ints and over records. */
#define NOINLINE __attribute__((noinline))
typedef unsigned long size_t;

static void swap_bytes(char *a, char *b, size_t size) {
    while (size--) { char t = *a; *a++ = *b; *b++ = t; }
}

NOINLINE void my_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    char *b = base;
    while (n > 8) {
        char *lo = b, *mid = b + (n / 2) * size, *hi = b + (n - 1) * size;
        if (cmp(mid, lo) < 0) swap_bytes(mid, lo, size);
        if (cmp(hi, mid) < 0) { swap_bytes(hi, mid, size); if (cmp(mid, lo) < 0) swap_bytes(mid, lo, size); }
        swap_bytes(mid, lo, size);  /* pivot at lo */
        size_t i = 1, j = n - 1;
        for (;;) {
            while (i <= j && cmp(b + i * size, lo) < 0) i++;
            while (j >= i && cmp(b + j * size, lo) > 0) j--;
            if (i >= j) break;
            swap_bytes(b + i * size, b + j * size, size);
            i++; j--;
        }
        swap_bytes(lo, b + j * size, size);
        if (j < n - j - 1) { my_qsort(b, j, size, cmp); b += (j + 1) * size; n -= j + 1; }
        else { my_qsort(b + (j + 1) * size, n - j - 1, size, cmp); n = j; }
    }
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && cmp(b + (k - 1) * size, b + k * size) > 0; k--)
            swap_bytes(b + (k - 1) * size, b + k * size, size);
}

static int asc(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x > y) - (x < y); }
static int desc(const void *a, const void *b) { return asc(b, a); }
static int by_low_bits(const void *a, const void *b) {
    int x = *(const int *)a & 255, y = *(const int *)b & 255;
    return x != y ? x - y : asc(a, b);
}

struct rec { long long key; int id; char tag; };
static int rec_cmp(const void *a, const void *b) {
    const struct rec *p = a, *q = b;
    if (p->key != q->key) return p->key < q->key ? -1 : 1;
    return p->id - q->id;
}

static int data[20000];
static struct rec recs[3000];
static int (*cmps[])(const void *, const void *) = {asc, desc, by_low_bits};

/* sort n pseudo-random ints with comparator k; the result is a position-weighted checksum, or -1 if the
 * order is wrong */
long long sort_ints(int n, unsigned seed, int k, int modulus) {
    if (n > 20000) n = 20000;
    for (int i = 0; i < n; i++) { seed = seed * 1664525u + 1013904223u; data[i] = (int)(seed >> 3) % modulus; }
    int (*cmp)(const void *, const void *) = cmps[(unsigned)k % 3];
    my_qsort(data, n, sizeof data[0], cmp);
    long long h = 0;
    for (int i = 0; i < n; i++) {
        if (i && cmp(&data[i - 1], &data[i]) > 0) return -1;
        h = h * 31 + data[i] + i;
    }
    return h;
}

long long sort_recs(int n, unsigned seed) {
    if (n > 3000) n = 3000;
    for (int i = 0; i < n; i++) {
        seed = seed * 22695477u + 1u;
        recs[i].key = (long long)(seed % 97) - 48;
        recs[i].id = i;
        recs[i].tag = (char)seed;
    }
    my_qsort(recs, n, sizeof recs[0], rec_cmp);
    long long h = 0;
    for (int i = 0; i < n; i++) h = h * 1000003 + recs[i].key * 7 + recs[i].id + recs[i].tag;
    return h;
}
