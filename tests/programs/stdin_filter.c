/* Reads standard input to the end: counts lines, words and bytes, and echoes it upper-cased. */
#include <ctype.h>
#include <stdio.h>

int main(void) {
    long lines = 0, words = 0, bytes = 0;
    int c, in_word = 0;
    unsigned sum = 0;
    while ((c = getchar()) != EOF) {
        bytes++;
        sum = sum * 31 + (unsigned)c;
        if (c == '\n')
            lines++;
        if (isspace(c))
            in_word = 0;
        else if (!in_word) {
            in_word = 1;
            words++;
        }
        if (bytes <= 2000)
            putchar(toupper(c));
    }
    printf("\n%ld %ld %ld %u\n", lines, words, bytes, sum);
    return 0;
}
