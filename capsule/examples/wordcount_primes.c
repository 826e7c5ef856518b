/* The README's main job: an ordinary C program with main, printf, malloc, qsort and a file, run inside the
 * kernel by `capsule demo` and compared with the same source built natively by gcc.
 *
 * It counts the primes below two million with a sieve, solves the N-queens puzzle for N = 1..10, writes a
 * generated text to a file, reads it back and prints its most frequent words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int queens(int n, int row, unsigned cols, unsigned d1, unsigned d2) {
    if (row == n)
        return 1;
    int count = 0;
    unsigned free_ = ~(cols | d1 | d2) & ((1u << n) - 1);
    while (free_) {
        unsigned bit = free_ & -free_;
        free_ ^= bit;
        count += queens(n, row + 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1);
    }
    return count;
}

struct word { char text[16]; int count; };

static int by_count(const void *a, const void *b) {
    const struct word *x = a, *y = b;
    return x->count != y->count ? y->count - x->count : strcmp(x->text, y->text);
}

int main(void) {
    const int limit = 2000000;
    unsigned char *composite = calloc(limit, 1);
    int primes = 0, last = 0;
    for (int i = 2; i < limit; i++) {
        if (composite[i])
            continue;
        primes++;
        last = i;
        for (long long j = (long long)i * i; j < limit; j += i)
            composite[j] = 1;
    }
    free(composite);
    printf("primes below %d: %d (largest %d)\n", limit, primes, last);

    printf("n-queens solutions:");
    for (int n = 1; n <= 10; n++)
        printf(" %d", queens(n, 0, 0, 0, 0));
    printf("\n");

    static const char *vocab[] = {"kernel", "verifier", "program", "map", "arena", "region", "fiber", "wasm"};
    FILE *f = fopen("story.txt", "w");
    unsigned s = 2024;
    for (int i = 0; i < 20000; i++) {
        s = s * 1103515245u + 12345u;
        fprintf(f, "%s%c", vocab[(s >> 16) % 8 < 5 ? (s >> 16) % 8 : (s >> 20) % 3], i % 12 == 11 ? '\n' : ' ');
    }
    fclose(f);
    struct word words[8] = {{{0}, 0}};
    int nwords = 0;
    char w[16];
    f = fopen("story.txt", "r");
    while (fscanf(f, "%15s", w) == 1) {
        int k = 0;
        while (k < nwords && strcmp(words[k].text, w))
            k++;
        if (k == nwords)
            strcpy(words[nwords++].text, w);
        words[k].count++;
    }
    fclose(f);
    qsort(words, nwords, sizeof *words, by_count);
    printf("most frequent words in story.txt:");
    for (int i = 0; i < nwords; i++)
        printf(" %s=%d", words[i].text, words[i].count);
    printf("\n");
    return 0;
}
