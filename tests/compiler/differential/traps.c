/* Traps deep in a call chain: both runtimes trap the same way, and the kernel's backtrace names the functions
 * from the trapping one outwards. */
#define NOINLINE __attribute__((noinline))
static volatile int sink;

NOINLINE int divide(int a, int b) { sink = a; return a / b; }
NOINLINE int middle(int a, int b) { int r = divide(a, b); sink = r; return r + 1; }
NOINLINE int outer(int a, int b) { int r = middle(a * 2, b); sink = r; return r * 3; }

NOINLINE long long divide64(long long a, long long b) { sink = (int)a; return a / b; }
long long rem64(long long a, long long b) { return a % b; }

NOINLINE void boom(int k) { sink = k; if (k > 0) __builtin_trap(); }
NOINLINE int level2(int k) { boom(k); sink = k; return k; }
NOINLINE int level1(int k) { int r = level2(k - 1); sink = r; return r + 1; }
int trap_chain(int k) { int r = level1(k); sink = r; return r; }

NOINLINE int recurse_then_trap(int depth) {
    if (depth == 0) __builtin_trap();
    int r = recurse_then_trap(depth - 1);
    sink = r;
    return r + depth;
}
/* unbounded recursion: the software stack (and wasmtime's) overflows */
NOINLINE int forever(int n) { int r = forever(n + 1); sink = r; return r + 1; }
