/* Recursive Fibonacci: call-heavy, every call a real (non-inlined) recursive call. */
__attribute__((noinline)) static long long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

long long run(int n) { return fib(n); }
