/* Functions of 12 arguments (i32 and i64 mixed): more than BPF's five argument registers and more than the
 * operand-stack registers, through direct and indirect calls. */
#define NOINLINE __attribute__((noinline))
typedef long long i64;

NOINLINE i64 mix12(int a, i64 b, int c, i64 d, int e, i64 f, int g, i64 h, int i, i64 j, int k, i64 l) {
    return a * 1 + b * 3 + c * 5 + d * 7 + e * 11 + f * 13 + g * 17 + h * 19 + i * 23 + j * 29 + k * 31 + l * 37;
}

NOINLINE int sel12(int a, int b, int c, int d, int e, int f, int g, int h, int i, int j, int k, int l) {
    int v[12] = {a, b, c, d, e, f, g, h, i, j, k, l};
    int best = v[0];
    for (int n = 1; n < 12; n++) best = (v[n] ^ n) > (best ^ (n - 1)) ? v[n] : best;
    return best - l + a;
}

typedef i64 (*f12)(int, i64, int, i64, int, i64, int, i64, int, i64, int, i64);
static volatile f12 via = mix12;

/* calls with arguments computed from two inputs, directly and through the table */
i64 drive(int x, i64 y) {
    i64 s = 0;
    for (int r = 0; r < 4; r++) {
        s += mix12(x + r, y - r, x * r, y * r, -x, -y, x ^ r, y ^ r, x >> 1, y >> 1, r, s);
        s ^= via(r, s, x, y, r, s, x, y, r, s, x, y);
        s += sel12(x, r, x + 1, r * 2, x - 3, 9, x * x, -r, x & 5, 7, r + x, 12);
    }
    return s;
}
