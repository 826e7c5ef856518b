/* The module wasm3 interprets in the tests: built with clang-19 for plain wasm32 (no libc, no imports). */
#include <stdint.h>

#define EXPORT(name) __attribute__((export_name(name)))

/* recursive: a call per step of the interpreter's own call stack */
EXPORT("fib") int32_t fib(int32_t n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

/* a loop over 64-bit arithmetic: a hash of 0..n-1 */
EXPORT("mix") int64_t mix(int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)i) * 1099511628211ull;
    return (int64_t)h;
}

/* memory: a sieve over a static array, the count of primes below n (n <= 100000) */
static uint8_t composite[100000];
EXPORT("primes") int32_t primes(int32_t n) {
    int32_t count = 0;
    for (int32_t i = 2; i < n; i++) {
        if (composite[i])
            continue;
        count++;
        for (int32_t j = 2 * i; j < n; j += i)
            composite[j] = 1;
    }
    return count;
}

/* floating point: a partial sum of the Leibniz series for pi */
EXPORT("leibniz") double leibniz(int32_t terms) {
    double sum = 0;
    for (int32_t k = 0; k < terms; k++)
        sum += (k % 2 ? -4.0 : 4.0) / (2 * k + 1);
    return sum;
}

/* a trap: integer division by zero when d is 0 */
EXPORT("divide") int32_t divide(int32_t a, int32_t d) { return a / d; }
