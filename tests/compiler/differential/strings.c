/* String processing in linear memory: the host writes text into ``buf`` (at ``buf_addr()``) in both runtimes;
 * the functions measure, reverse, count words, search with KMP and match a tiny regex. */
#define NOINLINE __attribute__((noinline))
typedef unsigned long size_t;

static char buf[65536];
static char pat[256];
static int fail[256];

char *buf_addr(void) { return buf; }
char *pat_addr(void) { return pat; }

NOINLINE size_t my_strlen(const char *s) { const char *p = s; while (*p) p++; return (size_t)(p - s); }

/* reverse buf in place; returns a hash of the result */
unsigned reverse(void) {
    size_t n = my_strlen(buf);
    for (size_t i = 0, j = n ? n - 1 : 0; i < j; i++, j--) { char t = buf[i]; buf[i] = buf[j]; buf[j] = t; }
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)buf[i]) * 16777619u;
    return h;
}

static int space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

int words(void) {
    int n = 0, in = 0;
    for (const char *p = buf; *p; p++) {
        if (space(*p)) in = 0;
        else if (!in) { in = 1; n++; }
    }
    return n;
}

int strlen_buf(void) { return (int)my_strlen(buf); }

/* KMP: number of (possibly overlapping) occurrences of pat in buf, times 1000, plus the first position + 1 */
long long kmp(void) {
    int m = (int)my_strlen(pat);
    if (m == 0) return 0;
    fail[0] = 0;
    for (int i = 1, k = 0; i < m; i++) {
        while (k && pat[i] != pat[k]) k = fail[k - 1];
        if (pat[i] == pat[k]) k++;
        fail[i] = k;
    }
    long long count = 0, first = -1;
    for (int i = 0, k = 0; buf[i]; i++) {
        while (k && buf[i] != pat[k]) k = fail[k - 1];
        if (buf[i] == pat[k]) k++;
        if (k == m) { if (first < 0) first = i - m + 1; count++; k = fail[k - 1]; }
    }
    return count * 1000 + first + 1;
}

/* Pike's tiny regex matcher: c . ^ $ * */
static int match_here(const char *re, const char *text);
static int match_star(int c, const char *re, const char *text) {
    do { if (match_here(re, text)) return 1; } while (*text != '\0' && (*text++ == c || c == '.'));
    return 0;
}
static int match_here(const char *re, const char *text) {
    if (re[0] == '\0') return 1;
    if (re[1] == '*') return match_star(re[0], re + 2, text);
    if (re[0] == '$' && re[1] == '\0') return *text == '\0';
    if (*text != '\0' && (re[0] == '.' || re[0] == *text)) return match_here(re + 1, text + 1);
    return 0;
}
/* 1 + position of the first match of pat (as a regex) in buf, or 0 */
int regex(void) {
    if (pat[0] == '^') return match_here(pat + 1, buf);
    const char *t = buf;
    do { if (match_here(pat, t)) return (int)(t - buf) + 1; } while (*t++ != '\0');
    return 0;
}

/* upper-case in place with a table: returns how many bytes changed */
int upcase(void) {
    int n = 0;
    for (char *p = buf; *p; p++) if (*p >= 'a' && *p <= 'z') { *p = (char)(*p - 32); n++; }
    return n;
}
