/* Function-pointer tables (call_indirect): dispatch by index, a table of different signatures, and calls
 * through a raw table index that traps (out of the table, null entry, wrong signature). */
typedef int (*binop)(int, int);
typedef long long (*unop64)(long long);

#define NOINLINE __attribute__((noinline))
static int add(int a, int b) { return a + b; }
static int sub(int a, int b) { return a - b; }
static int mul(int a, int b) { return a * b; }
static int mx(int a, int b) { return a > b ? a : b; }
static int band(int a, int b) { return a & b; }
static long long sq(long long x) { return x * x; }
static long long neg(long long x) { return -x; }

static binop ops[] = {add, sub, mul, mx, band};
static volatile unop64 unops[] = {sq, neg};

NOINLINE int apply(int i, int a, int b) { return ops[(unsigned)i % 5](a, b); }

/* fold a list of (op, value) pairs through the table, op chosen per step */
NOINLINE int fold(int n, int seed) {
    int acc = seed;
    for (int k = 0; k < n; k++) acc = ops[(unsigned)(acc ^ k) % 5](acc, k * 31 + 7);
    return acc;
}

long long apply64(int i, long long x) { return unops[i & 1](x); }

/* the table index of a function is its pointer value */
int index_of(int i) { return (int)(long)ops[(unsigned)i % 5]; }

/* call whatever table entry ``idx`` is, as a binop: traps for an index past the table or at null */
NOINLINE int call_raw(int idx, int a, int b) { return ((binop)(long)idx)(a, b); }
/* call it with the wrong signature: traps with a signature mismatch */
NOINLINE long long call_wrong(int idx, long long x) { return ((unop64)(long)idx)(x); }
