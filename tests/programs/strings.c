/* string.h, ctype.h and strto* functions. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    for (int c = 0; c < 128; c += 1) {
        printf("%02x:%d%d%d%d%d%d%d%d%d%d%d %02x %02x%s", c, !!isalpha(c), !!isdigit(c), !!isalnum(c), !!isspace(c),
               !!isupper(c), !!islower(c), !!ispunct(c), !!isprint(c), !!iscntrl(c), !!isxdigit(c), !!isgraph(c),
               toupper(c), tolower(c), c % 4 == 3 ? "\n" : "  ");
    }
    char buf[128];
    strcpy(buf, "Hello");
    strcat(buf, ", world");
    strncat(buf, "!!!???", 3);
    printf("%s len %zu\n", buf, strlen(buf));
    printf("cmp %d %d %d %d\n", strcmp("abc", "abd") < 0, strcmp("b", "a") > 0, strncmp("abcdef", "abcxyz", 3),
           memcmp("\x01\x02", "\x01\x03", 2) < 0);
    printf("chr %s | %s | %s\n", strchr(buf, 'o'), strrchr(buf, 'o'), strstr(buf, "wor"));
    printf("spn %zu %zu\n", strspn("aabbcxyz", "abc"), strcspn("hello world", " w"));
    printf("pbrk %s\n", strpbrk("find the vowel", "aeiou"));
    char tok[] = "alpha, beta;gamma  delta,,epsilon";
    for (char *t = strtok(tok, " ,;"); t; t = strtok(NULL, " ,;"))
        printf("[%s]", t);
    printf("\n");
    char m[32] = "0123456789abcdef";
    memmove(m + 4, m, 10);
    printf("memmove %s\n", m);
    memset(m, '*', 5);
    printf("memset %s\n", m);
    char dst[8];
    strncpy(dst, "toolongstring", sizeof dst - 1);
    dst[sizeof dst - 1] = 0;
    printf("strncpy %s\n", dst);
    const char *nums[] = {"0", "-17", "+42", "0x1F", "0755", "  123abc", "2147483647", "-2147483648",
                          "99999999999999999999", "z", "1010"};
    int bases[] = {10, 0, 16, 8, 2, 36};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        printf("%-22s", nums[i]);
        for (size_t b = 0; b < sizeof bases / sizeof *bases; b++) {
            char *end;
            errno = 0;
            long long v = strtoll(nums[i], &end, bases[b]);
            printf(" %lld/%d/%d", v, (int)(end - nums[i]), errno == ERANGE);
        }
        errno = 0;
        unsigned long long u = strtoull(nums[i], NULL, 0);
        printf(" u%llu atoi%d\n", u, strlen(nums[i]) < 12 ? atoi(nums[i]) : 0); /* overflowing atoi is undefined */
    }
    char *dup = strdup("duplicate me");
    printf("strdup %s %zu\n", dup, strlen(dup));
    free(dup);
    printf("strndup %s\n", strndup("abcdef", 3));
    printf("strerror ok %d\n", strerror(ENOENT) != NULL);
    printf("abs %d %ld %lld div %d %d\n", abs(-5), labs(-6L), llabs(-7LL), div(17, 5).quot, div(17, 5).rem);
    return 0;
}
