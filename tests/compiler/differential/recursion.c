/* Deep and branching recursion: a 100,000-deep chain that clang cannot turn into a loop, Ackermann, and mutual
 * recursion (is_even/is_odd) whose depth is the argument. */
#define NOINLINE __attribute__((noinline))

static int scratch[1024];

/* r * 3 + memory: not an accumulator form, so tail-recursion elimination leaves the recursion alone */
NOINLINE int deep(int n) {
    if (n <= 0) return 1;
    scratch[n & 1023] = n;
    int r = deep(n - 1);
    return r * 3 + scratch[(n * 7) & 1023];
}

NOINLINE unsigned ack(unsigned m, unsigned n) {
    if (m == 0) return n + 1;
    if (n == 0) return ack(m - 1, 1);
    return ack(m - 1, ack(m, n - 1));
}

NOINLINE int is_odd(unsigned n);
NOINLINE int is_even(unsigned n) { return n == 0 ? 1 : is_odd(n - 1); }
NOINLINE int is_odd(unsigned n) { return n == 0 ? 0 : is_even(n - 1); }

NOINLINE int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

/* a 64-bit result through recursion: the sum of a tree of calls */
NOINLINE long long tree(int depth, long long seed) {
    if (depth == 0) return seed * 2654435761LL;
    return tree(depth - 1, seed * 3 + 1) ^ (tree(depth - 1, seed + 7) >> 1);
}
