/* qsort and bsearch on integers, strings and structs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rec { int key; char name[12]; };

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
static int cmp_rec(const void *a, const void *b) {
    const struct rec *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return strcmp(x->name, y->name);
}

int main(void) {
    enum { N = 5000 };
    static int v[N];
    unsigned s = 7;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (int)(s >> 4) % 100000 - 50000;
    }
    qsort(v, N, sizeof *v, cmp_int);
    long long sum = 0;
    for (int i = 0; i < N; i++) {
        if (i && v[i - 1] > v[i]) {
            printf("not sorted at %d\n", i);
            return 1;
        }
        sum += (long long)v[i] * (i % 13);
    }
    printf("ints min %d max %d weighted %lld\n", v[0], v[N - 1], sum);
    int hits = 0;
    for (int k = -50000; k < 50000; k += 37)
        hits += bsearch(&k, v, N, sizeof *v, cmp_int) != NULL;
    printf("bsearch hits %d\n", hits);
    const char *words[] = {"pear", "apple", "fig", "banana", "cherry", "date", "elderberry", "grape", "kiwi", "lemon",
                           "mango", "apple2", "Apple", "zucchini", ""};
    size_t nw = sizeof words / sizeof *words;
    qsort(words, nw, sizeof *words, cmp_str);
    for (size_t i = 0; i < nw; i++)
        printf("%s%s", i ? "," : "", words[i]);
    printf("\n");
    const char *key = "kiwi";
    const char **found = bsearch(&key, words, nw, sizeof *words, cmp_str);
    printf("kiwi at %d\n", found ? (int)(found - words) : -1);
    struct rec recs[200];
    for (int i = 0; i < 200; i++) {
        recs[i].key = (i * 7919) % 23;
        snprintf(recs[i].name, sizeof recs[i].name, "n%03d", (i * 31) % 200);
    }
    qsort(recs, 200, sizeof *recs, cmp_rec);
    for (int i = 0; i < 200; i += 25)
        printf("rec %d %s\n", recs[i].key, recs[i].name);
    return 0;
}
