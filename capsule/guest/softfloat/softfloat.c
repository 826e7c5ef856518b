/* capsule soft-float: every WebAssembly f32/f64 operation as integer-only BPF functions.
 *
 * Written from scratch for capsule. Compiled with `clang-19 -target bpf -mcpu=v4 -O2 -g`; each operation is one
 * global (non-static, noinline) function `capsule_<op>` taking and returning `unsigned long long`, so the kernel
 * verifies each one once, independently, and the compiler calls it as an ordinary BPF call (args in r1..r2,
 * result in r0). Helpers are always inlined: no function here calls another, so each can be lifted out alone.
 *
 * Value representation (capsule/compiler/values.py): an f32 is its 32 raw bits zero-extended to 64, an f64 its
 * 64 raw bits, an i32 is zero-extended. Inputs are masked to their width, so stray high bits are harmless.
 *
 * Arithmetic: IEEE 754 binary32/binary64, round to nearest, ties to even, subnormals kept (no flushing), signed
 * zeros. An f32 add/sub/mul/div/sqrt is computed exactly rounded in binary64 and then rounded to binary32: that
 * double rounding is innocuous because 53 >= 2*24 + 2 (and for subnormal binary32 results the sum is exact, the
 * product is exact in binary64, and a quotient cannot fall within half a binary64 ulp of a binary32 midpoint).
 *
 * NaN rules, measured on wasmtime (Cranelift, x86-64 with AVX) on this machine; "quiet(x)" sets the quiet bit
 * (f64 bit 51, f32 bit 22) and keeps sign and payload:
 *   - add, sub, mul, div: if a is NaN -> quiet(a); else if b is NaN -> quiet(b).
 *   - invalid operations with no NaN input (inf - inf, 0 * inf, 0 / 0, inf / inf, sqrt of a negative
 *     non-zero number or of -inf) -> the x86 "default NaN", NEGATIVE quiet with zero payload:
 *     f64 0xFFF8000000000000, f32 0xFFC00000.
 *   - min, max: if b is NaN -> quiet(b); else if a is NaN -> quiet(a) (note: the opposite order to add).
 *     min(-0, +0) = min(+0, -0) = -0; max(-0, +0) = max(+0, -0) = +0.
 *   - sqrt, ceil, floor, trunc, nearest of a NaN -> quiet(a).
 *   - promote f32 -> f64 of a NaN: sign kept, payload shifted to the top (f64 frac = f32 frac << 29), quieted.
 *   - demote f64 -> f32 of a NaN: sign kept, f32 frac = top 23 bits of the f64 frac (frac >> 29), quieted.
 *   - neg, abs, copysign are not here: they are bit operations the compiler inlines and they never touch the
 *     payload: neg flips the sign bit (x ^ 1<<63 / x ^ 1<<31), abs clears it (x & ~(1<<63)), copysign(a, b)
 *     takes a's bits without its sign and b's sign bit ((a & ~S) | (b & S)), NaN or not.
 *   - comparisons: any NaN operand makes eq/lt/gt/le/ge false and ne true; -0 == +0.
 *   - conversions to integers: the saturating form (trunc_sat) gives 0 for NaN and clamps out-of-range values
 *     to the type's min/max; the trapping form traps when capsule_<f>_trunc_<i>_ok(a) == 0 (NaN, or the value
 *     truncated toward zero not representable) and otherwise has the value of the saturating function.
 */

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef int i32;

#define SF_API __attribute__((noinline)) u64
#define SF_INLINE static inline __attribute__((always_inline))

#define F64_SIGN 0x8000000000000000ULL
#define F64_EXP 0x7FF0000000000000ULL
#define F64_FRAC 0x000FFFFFFFFFFFFFULL
#define F64_QUIET 0x0008000000000000ULL
#define F64_DEFAULT_NAN 0xFFF8000000000000ULL
#define F64_ONE 0x3FF0000000000000ULL

#define F32_SIGN 0x80000000ULL
#define F32_EXP 0x7F800000ULL
#define F32_FRAC 0x007FFFFFULL
#define F32_QUIET 0x00400000ULL
#define F32_DEFAULT_NAN 0xFFC00000ULL

#include "softfloat_core.h"

/* ---- f64 operations -------------------------------------------------------------------------------------- */

SF_INLINE u64 nan2_64(u64 a, u64 b) { return (is_nan64(a) ? a : b) | F64_QUIET; }
SF_INLINE u64 nan2_32(u64 a, u64 b) { return (is_nan32(a) ? a : b) | F32_QUIET; }

SF_API capsule_f64_add(u64 a, u64 b)
{
	if (is_nan64(a) || is_nan64(b))
		return nan2_64(a, b);
	return add_num(a, b);
}

SF_API capsule_f64_sub(u64 a, u64 b)
{
	if (is_nan64(a) || is_nan64(b))
		return nan2_64(a, b);
	return add_num(a, b ^ F64_SIGN);
}

SF_API capsule_f64_mul(u64 a, u64 b)
{
	if (is_nan64(a) || is_nan64(b))
		return nan2_64(a, b);
	return mul_num(a, b);
}

SF_API capsule_f64_div(u64 a, u64 b)
{
	if (is_nan64(a) || is_nan64(b))
		return nan2_64(a, b);
	return div_num(a, b);
}

SF_API capsule_f64_sqrt(u64 a)
{
	if (is_nan64(a))
		return a | F64_QUIET;
	return sqrt_num(a);
}

/* Total order of non-NaN f64 bit patterns as signed integers: -0 sorts just below +0. */
SF_INLINE i64 key64(u64 a) { return (a & F64_SIGN) ? -(i64)(a & ~F64_SIGN) - 1 : (i64)a; }
SF_INLINE i32 key32(u64 a) { return (a & F32_SIGN) ? -(i32)(a & ~F32_SIGN) - 1 : (i32)a; }

SF_API capsule_f64_min(u64 a, u64 b)
{
	if (is_nan64(b))
		return b | F64_QUIET;
	if (is_nan64(a))
		return a | F64_QUIET;
	return key64(a) <= key64(b) ? a : b;
}

SF_API capsule_f64_max(u64 a, u64 b)
{
	if (is_nan64(b))
		return b | F64_QUIET;
	if (is_nan64(a))
		return a | F64_QUIET;
	return key64(a) >= key64(b) ? a : b;
}

enum { R_TRUNC, R_FLOOR, R_CEIL, R_NEAREST };

/* Round to an integral value in one of four modes, working on the bits: clear the fraction bits and, when the
 * mode says so, add one unit in the last integral place (a carry into the exponent is exactly right). */
SF_INLINE u64 round_int64(u64 a, int mode)
{
	if (is_nan64(a))
		return a | F64_QUIET;
	int exp = (a >> 52) & 0x7FF;
	u64 sign = a & F64_SIGN;
	if (exp >= 1075)
		return a; /* |a| >= 2^52 (or inf): already integral */
	if (exp < 1023) {
		/* |a| < 1 */
		if ((a & ~F64_SIGN) == 0)
			return a;
		if (mode == R_FLOOR)
			return sign ? (F64_SIGN | F64_ONE) : 0;
		if (mode == R_CEIL)
			return sign ? F64_SIGN : F64_ONE;
		if (mode == R_NEAREST && exp == 1022 && (a & F64_FRAC))
			return sign | F64_ONE; /* 0.5 < |a| < 1 */
		return sign;
	}
	int n = 1075 - exp; /* fraction bits, 1..52 */
	u64 unit = 1ULL << n;
	u64 mask = unit - 1;
	u64 frac = a & mask;
	if (frac == 0)
		return a;
	u64 t = a & ~mask;
	if (mode == R_FLOOR)
		return sign ? t + unit : t;
	if (mode == R_CEIL)
		return sign ? t : t + unit;
	if (mode == R_NEAREST) {
		u64 half = unit >> 1;
		/* the bit at position n is the integer's lowest bit (for n == 52, the exponent's lowest bit: 1023
		 * is odd and so is the integer 1) */
		if (frac > half || (frac == half && (t & unit)))
			return t + unit;
	}
	return t;
}

SF_INLINE u64 round_int32(u64 a, int mode)
{
	if (is_nan32(a))
		return a | F32_QUIET;
	int exp = (a >> 23) & 0xFF;
	u64 sign = a & F32_SIGN;
	if (exp >= 150)
		return a;
	if (exp < 127) {
		if ((a & ~F32_SIGN) == 0)
			return a;
		if (mode == R_FLOOR)
			return sign ? (F32_SIGN | 0x3F800000) : 0;
		if (mode == R_CEIL)
			return sign ? F32_SIGN : 0x3F800000;
		if (mode == R_NEAREST && exp == 126 && (a & F32_FRAC))
			return sign | 0x3F800000;
		return sign;
	}
	int n = 150 - exp;
	u64 unit = 1ULL << n;
	u64 mask = unit - 1;
	u64 frac = a & mask;
	if (frac == 0)
		return a;
	u64 t = a & ~mask;
	if (mode == R_FLOOR)
		return sign ? t + unit : t;
	if (mode == R_CEIL)
		return sign ? t : t + unit;
	if (mode == R_NEAREST) {
		u64 half = unit >> 1;
		if (frac > half || (frac == half && (t & unit)))
			return t + unit;
	}
	return t;
}

SF_API capsule_f64_ceil(u64 a) { return round_int64(a, R_CEIL); }
SF_API capsule_f64_floor(u64 a) { return round_int64(a, R_FLOOR); }
SF_API capsule_f64_trunc(u64 a) { return round_int64(a, R_TRUNC); }
SF_API capsule_f64_nearest(u64 a) { return round_int64(a, R_NEAREST); }

/* Comparisons: 0 or 1. Two non-NaN values compare as their keys. */
SF_API capsule_f64_eq(u64 a, u64 b) { return !is_nan64(a) && !is_nan64(b) && (a == b || ((a | b) << 1) == 0); }
SF_API capsule_f64_ne(u64 a, u64 b) { return !(!is_nan64(a) && !is_nan64(b) && (a == b || ((a | b) << 1) == 0)); }

SF_INLINE i64 cmpkey64(u64 a) { return ((a << 1) == 0) ? 0 : key64(a); } /* -0 and +0 alike */
SF_INLINE i32 cmpkey32(u64 a) { return ((a << 33) == 0) ? 0 : key32(a); }

SF_API capsule_f64_lt(u64 a, u64 b) { return !is_nan64(a) && !is_nan64(b) && cmpkey64(a) < cmpkey64(b); }
SF_API capsule_f64_gt(u64 a, u64 b) { return !is_nan64(a) && !is_nan64(b) && cmpkey64(a) > cmpkey64(b); }
SF_API capsule_f64_le(u64 a, u64 b) { return !is_nan64(a) && !is_nan64(b) && cmpkey64(a) <= cmpkey64(b); }
SF_API capsule_f64_ge(u64 a, u64 b) { return !is_nan64(a) && !is_nan64(b) && cmpkey64(a) >= cmpkey64(b); }

/* ---- f32 operations: NaNs at binary32, numbers through the binary64 cores ------------------------------- */

SF_API capsule_f32_add(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	if (is_nan32(a) || is_nan32(b))
		return nan2_32(a, b);
	u64 r = add_num(promote_num(a), promote_num(b));
	return r == F64_DEFAULT_NAN ? F32_DEFAULT_NAN : demote_num(r);
}

SF_API capsule_f32_sub(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	if (is_nan32(a) || is_nan32(b))
		return nan2_32(a, b);
	u64 r = add_num(promote_num(a), promote_num(b) ^ F64_SIGN);
	return r == F64_DEFAULT_NAN ? F32_DEFAULT_NAN : demote_num(r);
}

SF_API capsule_f32_mul(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	if (is_nan32(a) || is_nan32(b))
		return nan2_32(a, b);
	u64 r = mul_num(promote_num(a), promote_num(b));
	return r == F64_DEFAULT_NAN ? F32_DEFAULT_NAN : demote_num(r);
}

SF_API capsule_f32_div(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	if (is_nan32(a) || is_nan32(b))
		return nan2_32(a, b);
	u64 r = div_num(promote_num(a), promote_num(b));
	return r == F64_DEFAULT_NAN ? F32_DEFAULT_NAN : demote_num(r);
}

SF_API capsule_f32_sqrt(u64 a)
{
	a = (u32)a;
	if (is_nan32(a))
		return a | F32_QUIET;
	u64 r = sqrt_num(promote_num(a));
	return r == F64_DEFAULT_NAN ? F32_DEFAULT_NAN : demote_num(r);
}

SF_API capsule_f32_min(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	if (is_nan32(b))
		return b | F32_QUIET;
	if (is_nan32(a))
		return a | F32_QUIET;
	return key32(a) <= key32(b) ? a : b;
}

SF_API capsule_f32_max(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	if (is_nan32(b))
		return b | F32_QUIET;
	if (is_nan32(a))
		return a | F32_QUIET;
	return key32(a) >= key32(b) ? a : b;
}

SF_API capsule_f32_ceil(u64 a) { return round_int32((u32)a, R_CEIL); }
SF_API capsule_f32_floor(u64 a) { return round_int32((u32)a, R_FLOOR); }
SF_API capsule_f32_trunc(u64 a) { return round_int32((u32)a, R_TRUNC); }
SF_API capsule_f32_nearest(u64 a) { return round_int32((u32)a, R_NEAREST); }

SF_INLINE int eq32(u64 a, u64 b)
{
	a = (u32)a; b = (u32)b;
	return !is_nan32(a) && !is_nan32(b) && (a == b || ((a | b) << 33) == 0);
}

SF_INLINE int ord32(u64 a, u64 b) { return !is_nan32((u32)a) && !is_nan32((u32)b); }

SF_API capsule_f32_eq(u64 a, u64 b) { return eq32(a, b); }
SF_API capsule_f32_ne(u64 a, u64 b) { return !eq32(a, b); }
SF_API capsule_f32_lt(u64 a, u64 b) { return ord32(a, b) && cmpkey32((u32)a) < cmpkey32((u32)b); }
SF_API capsule_f32_gt(u64 a, u64 b) { return ord32(a, b) && cmpkey32((u32)a) > cmpkey32((u32)b); }
SF_API capsule_f32_le(u64 a, u64 b) { return ord32(a, b) && cmpkey32((u32)a) <= cmpkey32((u32)b); }
SF_API capsule_f32_ge(u64 a, u64 b) { return ord32(a, b) && cmpkey32((u32)a) >= cmpkey32((u32)b); }

/* ---- promote / demote ------------------------------------------------------------------------------------ */

SF_API capsule_f64_promote_f32(u64 a)
{
	a = (u32)a;
	if (is_nan32(a))
		return ((a & F32_SIGN) << 32) | F64_EXP | F64_QUIET | ((a & F32_FRAC) << 29);
	return promote_num(a);
}

SF_API capsule_f32_demote_f64(u64 a)
{
	if (is_nan64(a))
		return ((a & F64_SIGN) >> 32) | F32_EXP | F32_QUIET | ((a & F64_FRAC) >> 29);
	return demote_num(a);
}

/* ---- integers to floats (round to nearest even) ---------------------------------------------------------- */

SF_INLINE u64 from_int64(u64 sign, u64 mag)
{
	if (mag == 0)
		return 0;
	i64 e = 62;
	u64 m = normalise(mag, &e);
	return round_pack64(sign, e, m);
}

SF_INLINE u64 from_int32(u64 sign, u64 mag)
{
	if (mag == 0)
		return 0;
	i64 e = 62;
	u64 m = normalise(mag, &e);
	return round_pack32(sign >> 32, e, m);
}

SF_API capsule_f64_convert_i32_s(u64 a)
{
	i64 v = (i32)a;
	return v < 0 ? from_int64(F64_SIGN, -(u64)v) : from_int64(0, v);
}
SF_API capsule_f64_convert_i32_u(u64 a) { return from_int64(0, (u32)a); }
SF_API capsule_f64_convert_i64_s(u64 a)
{
	i64 v = (i64)a;
	return v < 0 ? from_int64(F64_SIGN, -(u64)v) : from_int64(0, v);
}
SF_API capsule_f64_convert_i64_u(u64 a) { return from_int64(0, a); }

SF_API capsule_f32_convert_i32_s(u64 a)
{
	i64 v = (i32)a;
	return v < 0 ? from_int32(F64_SIGN, -(u64)v) : from_int32(0, v);
}
SF_API capsule_f32_convert_i32_u(u64 a) { return from_int32(0, (u32)a); }
SF_API capsule_f32_convert_i64_s(u64 a)
{
	i64 v = (i64)a;
	return v < 0 ? from_int32(F64_SIGN, -(u64)v) : from_int32(0, v);
}
SF_API capsule_f32_convert_i64_u(u64 a) { return from_int32(0, a); }

/* ---- floats to integers ----------------------------------------------------------------------------------
 * trunc_parts splits a non-NaN f64 into sign and |trunc(a)|, with *big set when |trunc(a)| >= 2^64. */

SF_INLINE u64 trunc_parts(u64 a, int *big)
{
	int exp = (a >> 52) & 0x7FF;
	*big = 0;
	if (exp < 1023)
		return 0;
	if (exp >= 1023 + 64) {
		*big = 1;
		return 0;
	}
	u64 m = (a & F64_FRAC) | (1ULL << 52);
	int n = exp - 1075;
	return n >= 0 ? m << n : m >> -n;
}

/* Each returns the saturated value; *ok says whether the exact truncation was in range (and a not NaN). */
SF_INLINE u64 to_i32_s(u64 a, int *ok)
{
	int big;
	if (is_nan64(a)) { *ok = 0; return 0; }
	u64 v = trunc_parts(a, &big);
	if (a & F64_SIGN) {
		*ok = !big && v <= 0x80000000ULL;
		return *ok ? (u32)(-(i64)v) : 0x80000000ULL;
	}
	*ok = !big && v <= 0x7FFFFFFFULL;
	return *ok ? v : 0x7FFFFFFFULL;
}

SF_INLINE u64 to_i32_u(u64 a, int *ok)
{
	int big;
	if (is_nan64(a)) { *ok = 0; return 0; }
	u64 v = trunc_parts(a, &big);
	if (a & F64_SIGN) {
		*ok = !big && v == 0;
		return 0;
	}
	*ok = !big && v <= 0xFFFFFFFFULL;
	return *ok ? v : 0xFFFFFFFFULL;
}

SF_INLINE u64 to_i64_s(u64 a, int *ok)
{
	int big;
	if (is_nan64(a)) { *ok = 0; return 0; }
	u64 v = trunc_parts(a, &big);
	if (a & F64_SIGN) {
		*ok = !big && v <= 0x8000000000000000ULL;
		return *ok ? -v : 0x8000000000000000ULL;
	}
	*ok = !big && v <= 0x7FFFFFFFFFFFFFFFULL;
	return *ok ? v : 0x7FFFFFFFFFFFFFFFULL;
}

SF_INLINE u64 to_i64_u(u64 a, int *ok)
{
	int big;
	if (is_nan64(a)) { *ok = 0; return 0; }
	u64 v = trunc_parts(a, &big);
	if (a & F64_SIGN) {
		*ok = !big && v == 0;
		return 0;
	}
	*ok = !big;
	return big ? 0xFFFFFFFFFFFFFFFFULL : v;
}

/* f32 sources go through promote, which is exact (NaN stays NaN). */
#define TRUNC_FUNCS(F, I, CONV, PREP)                                                                              \
	SF_API capsule_##F##_trunc_sat_##I(u64 a) { int ok; return CONV(PREP(a), &ok); }                       \
	SF_API capsule_##F##_trunc_##I##_ok(u64 a) { int ok; CONV(PREP(a), &ok); return ok; }

SF_INLINE u64 prep64(u64 a) { return a; }
SF_INLINE u64 prep32(u64 a) { return is_nan32((u32)a) ? F64_DEFAULT_NAN : promote_num((u32)a); }

TRUNC_FUNCS(f64, i32_s, to_i32_s, prep64)
TRUNC_FUNCS(f64, i32_u, to_i32_u, prep64)
TRUNC_FUNCS(f64, i64_s, to_i64_s, prep64)
TRUNC_FUNCS(f64, i64_u, to_i64_u, prep64)
TRUNC_FUNCS(f32, i32_s, to_i32_s, prep32)
TRUNC_FUNCS(f32, i32_u, to_i32_u, prep32)
TRUNC_FUNCS(f32, i64_s, to_i64_s, prep32)
TRUNC_FUNCS(f32, i64_u, to_i64_u, prep32)
