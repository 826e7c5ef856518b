/* Structs passed and returned by value: wasm32 passes them through the C shadow stack (by pointer, with a
 * copy), so this exercises __stack_pointer, memcpy of aggregates and sret returns. */
#define NOINLINE __attribute__((noinline))
typedef unsigned long size_t;

void *memcpy(void *d, const void *s, size_t n) {
    unsigned char *dd = d;
    const unsigned char *ss = s;
    while (n--) *dd++ = *ss++;
    return d;
}
void *memset(void *d, int c, size_t n) {
    unsigned char *dd = d;
    while (n--) *dd++ = (unsigned char)c;
    return d;
}

struct vec3 { int x, y, z; };
struct big { long long a; int b; short c; char d; long long e[6]; };

NOINLINE struct vec3 vadd(struct vec3 p, struct vec3 q) { return (struct vec3){p.x + q.x, p.y + q.y, p.z + q.z}; }
NOINLINE struct vec3 vcross(struct vec3 p, struct vec3 q) {
    return (struct vec3){p.y * q.z - p.z * q.y, p.z * q.x - p.x * q.z, p.x * q.y - p.y * q.x};
}
NOINLINE int vdot(struct vec3 p, struct vec3 q) { return p.x * q.x + p.y * q.y + p.z * q.z; }

NOINLINE struct big bump(struct big b, int k) {
    b.a += k;
    b.b ^= k;
    b.c = (short)(b.c + k);
    b.d = (char)(b.d - k);
    for (int i = 0; i < 6; i++) b.e[i] = b.e[i] * 3 + i + k;
    return b;
}

NOINLINE long long digest(struct big b) {
    long long h = b.a ^ ((long long)b.b << 7) ^ ((long long)b.c << 19) ^ ((long long)b.d << 29);
    for (int i = 0; i < 6; i++) h = h * 1000003 + b.e[i];
    return h;
}

int geometry(int a, int b, int c) {
    struct vec3 p = {a, b, c}, q = {c, -a, b + 1};
    struct vec3 r = vadd(vcross(p, q), vadd(p, q));
    return vdot(r, p) ^ vdot(q, r);
}

long long chain(long long seed, int rounds) {
    struct big b;
    memset(&b, 0, sizeof b);
    b.a = seed;
    b.b = (int)seed;
    for (int i = 0; i < 6; i++) b.e[i] = seed + i;
    for (int r = 0; r < rounds; r++) b = bump(b, r);
    return digest(b);
}
