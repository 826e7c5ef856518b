#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
static jmp_buf jb;
static int depth_reached;
__attribute__((noinline)) void deep(int n) { char buf[64]; buf[0] = (char)n; depth_reached = n + buf[0] - n; if (n == 0) longjmp(jb, 42); deep(n - 1); printf("never\n"); }
static jmp_buf inner;
__attribute__((noinline)) int try_div(int a, int b) { if (b == 0) longjmp(inner, 7); return a / b; }
int safe_div(int a, int b) { volatile int r; int e = setjmp(inner); if (e) return -e; r = try_div(a, b); return r; }
int main(void) {
    int r = setjmp(jb);
    if (r == 0) { printf("first\n"); deep(1000); }
    printf("back with %d (depth %d)\n", r, depth_reached);
    printf("div %d %d\n", safe_div(10, 2), safe_div(1, 0));
    for (int i = 0; i < 3; i++) { int v = setjmp(jb); if (v < 3) { printf("loop %d\n", v); longjmp(jb, v + 1); } }
    printf("done\n");
    return 0;
}
