/* 64- and 32-bit integer arithmetic, one exported function per operation, so the harness can call each with
 * random and edge operands (division traps included). */
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned u32;

i64 mul64(i64 a, i64 b) { return a * b; }
i64 divs64(i64 a, i64 b) { return a / b; }
u64 divu64(u64 a, u64 b) { return a / b; }
i64 rems64(i64 a, i64 b) { return a % b; }
u64 remu64(u64 a, u64 b) { return a % b; }
i64 shl64(i64 a, i64 b) { return (i64)((u64)a << (b & 63)); }
i64 shrs64(i64 a, i64 b) { return a >> (b & 63); }
u64 shru64(u64 a, u64 b) { return a >> (b & 63); }
u64 rotl64(u64 a, u64 b) { return (a << (b & 63)) | (a >> (-b & 63)); }
u64 rotr64(u64 a, u64 b) { return (a >> (b & 63)) | (a << (-b & 63)); }
i64 clz64(u64 a) { return __builtin_clzll(a); }  /* i64.clz: 64 for 0 */
i64 ctz64(u64 a) { return __builtin_ctzll(a); }
i64 popcnt64(u64 a) { return __builtin_popcountll(a); }
int lt64(i64 a, i64 b) { return (a < b) + 2 * ((u64)a < (u64)b) + 4 * (a == b); }
i64 wide(i64 a, i64 b) {  /* a mixed expression: all of it in one function */
    u64 x = (u64)a * 0x9E3779B97F4A7C15ull + (u64)b;
    x ^= x >> 29;
    x = (x << 11 | x >> 53) * (u64)(b | 1);
    return (i64)(x ^ (u64)(a >> 3) ^ (u64)__builtin_popcountll(x));
}

int mul32(int a, int b) { return a * b; }
int divs32(int a, int b) { return a / b; }
u32 divu32(u32 a, u32 b) { return a / b; }
int rems32(int a, int b) { return a % b; }
u32 remu32(u32 a, u32 b) { return a % b; }
int shl32(int a, int b) { return (int)((u32)a << (b & 31)); }
int shrs32(int a, int b) { return a >> (b & 31); }
u32 shru32(u32 a, u32 b) { return a >> (b & 31); }
u32 rotl32(u32 a, u32 b) { return (a << (b & 31)) | (a >> (-b & 31)); }
u32 rotr32(u32 a, u32 b) { return (a >> (b & 31)) | (a << (-b & 31)); }
int clz32(u32 a) { return __builtin_clz(a); }
int ctz32(u32 a) { return __builtin_ctz(a); }
int popcnt32(u32 a) { return __builtin_popcount(a); }
i64 ext(int a) { return (i64)a + (i64)(u32)a * 3 + (i64)(signed char)a + (i64)(short)a; }
int wrap32(i64 a) { return (int)a ^ (int)(a >> 32); }
