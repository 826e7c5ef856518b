/* Every integer conversion of printf with flags, widths, precisions and length modifiers. */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int main(void) {
    const int ints[] = {0, 1, -1, 42, -42, 255, 65535, INT_MAX, INT_MIN, 123456789};
    const char *fmts[] = {"%d", "%i", "%5d", "%-5d|", "%05d", "%+d", "% d", "%.3d", "%8.3d", "%-+8.3d|", "%x", "%X",
                          "%#x", "%#X", "%o", "%#o", "%u", "%08x", "%#010x", "%.0d", "%hd", "%hhd", "%hu", "%hhu",
                          "%hx", "%c"};
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        printf("%-10s", fmts[f]);
        for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
            int v = ints[i];
            if (fmts[f][1] == 'c')
                v = 'A' + (int)(i * 3);
            printf(" [");
            printf(fmts[f], v);
            printf("]");
        }
        printf("\n");
    }
    const long long lls[] = {0, -1, LLONG_MAX, LLONG_MIN, 1234567890123456789LL, -987654321098765LL};
    for (size_t i = 0; i < sizeof lls / sizeof *lls; i++)
        printf("ll %lld %lli %llu %llx %llX %#llo %+20lld|%-20lld|\n", lls[i], lls[i], (unsigned long long)lls[i],
               (unsigned long long)lls[i], (unsigned long long)lls[i], (unsigned long long)lls[i], lls[i], lls[i]);
    const long ls[] = {0, -7, 2147483647L, -2147483647L - 1}; /* long is 32 bits in wasm32 */
    for (size_t i = 0; i < sizeof ls / sizeof *ls; i++)
        printf("l %ld %lx %lu\n", ls[i], (unsigned long)(uint32_t)ls[i], (unsigned long)(uint32_t)ls[i]);
    printf("j %jd %ju %jx\n", (intmax_t)-5, (uintmax_t)UINT64_MAX, (uintmax_t)0xdeadbeefcafeULL);
    printf("z %zu %zx %zd\n", (size_t)12345, (size_t)0xabcdef, (ptrdiff_t)-3);
    printf("t %td\n", (ptrdiff_t)-99);
    printf("inttypes %" PRId8 " %" PRIu16 " %" PRIx32 " %" PRId64 " %" PRIX64 "\n", (int8_t)-8, (uint16_t)65000,
           (uint32_t)0xfeedface, (int64_t)-1, (uint64_t)0x0123456789ABCDEFULL);
    printf("star %*d|%-*d|%.*d|%*.*x|\n", 6, 42, 6, 42, 4, 7, 10, 6, 0xbeef);
    printf("s %s|%10s|%-10s|%.3s|%10.2s|%%\n", "hello", "right", "left", "truncate", "ab");
    int n1 = 0, n2 = 0;
    printf("count%n this%n\n", &n1, &n2);
    printf("n %d %d\n", n1, n2);
    char buf[32];
    int w = snprintf(buf, sizeof buf, "%s-%d-%x-%s", "snprintf", 12345, 0xabcdefu, "truncated at thirty one");
    printf("snprintf %d [%s]\n", w, buf);
    w = snprintf(NULL, 0, "%d", INT_MIN);
    printf("measure %d\n", w);
    return 0;
}
