/* capsule soft-float: the internal numeric core (branch-free helpers, unpack/round, the binary64 kernels of
 * add, mul, div and sqrt on non-NaN operands). Included by softfloat.c only; see there for the rules. */

#ifndef CAPSULE_SOFTFLOAT_CORE_H
#define CAPSULE_SOFTFLOAT_CORE_H

/* ---- branch-free building blocks -------------------------------------------------------------------------
 * Why branch-free: the verifier explores both sides of every conditional jump, and it can only merge the two
 * paths again where they rejoin if the registers that differ are "imprecise". A jump whose outcome follows from
 * an earlier one (clang re-tests a condition for every value a `?:` selects) marks its operands precise, and then
 * the paths never merge: a few dozen such diamonds in a row cost millions of verifier steps. So the numeric
 * cores below compute conditions as 0/1 bits with arithmetic, pass them through an empty asm (which hides them
 * from LLVM, so it cannot turn them back into compares and selects), and select by multiplying with the bit.
 * Not with all-ones masks: this kernel's verifier splits its state in two whenever a register known to be 0 or
 * -1 (the result of `x s>> 63`) is AND-ed or OR-ed, so every mask would double the paths to verify. */

/* An optimisation barrier: LLVM must treat the value as unknown. Costs nothing at run time. */
SF_INLINE u64 opq(u64 v)
{
	asm volatile("" : "+r"(v));
	return v;
}

/* 1 if x < y, else 0, for x and y whose difference does not overflow as signed 64-bit numbers (every use here
 * compares values below 2^63, or small signed exponents). */
SF_INLINE u64 b_lt(u64 x, u64 y) { return opq(opq(x - y) >> 63); }
/* 1 if x != 0. */
SF_INLINE u64 b_nz(u64 x) { return opq(opq(opq(-x) | x) >> 63); }
/* bit ? a : b for a bit of 0 or 1. */
SF_INLINE u64 sel(u64 bit, u64 a, u64 b) { return b + (a - b) * bit; }

/* Leading zeros of a non-zero 64-bit value: six branch-free halving steps. */
SF_INLINE u64 clz64(u64 x)
{
	u64 n = 0, s;
	s = (b_nz(x >> 32) ^ 1) << 5; x <<= s; n += s;
	s = (b_nz(x >> 48) ^ 1) << 4; x <<= s; n += s;
	s = (b_nz(x >> 56) ^ 1) << 3; x <<= s; n += s;
	s = (b_nz(x >> 60) ^ 1) << 2; x <<= s; n += s;
	s = (b_nz(x >> 62) ^ 1) << 1; x <<= s; n += s;
	n += b_nz(x >> 63) ^ 1;
	return n;
}

/* x >> n for 0 <= n <= 63, with every bit shifted out OR-ed into bit 0 ("sticky"), so rounding still sees
 * them. For x < 2^63 a shift of 63 leaves just the sticky bit, the right answer for any larger shift too. */
SF_INLINE u64 shr_sticky(u64 x, u64 n)
{
	u64 lost = x & ((1ULL << n) - 1);
	return (x >> n) | b_nz(lost);
}

/* Clamp a shift count (a small non-negative number) to 63. */
SF_INLINE u64 clamp63(u64 n) { return sel(b_lt(63, n), 63, n); }

SF_INLINE int is_nan64(u64 a) { return (a & ~F64_SIGN) > F64_EXP; }
SF_INLINE int is_nan32(u64 a) { return (a & ~F32_SIGN) > F32_EXP; }

/* ---- the internal form: sign, exponent e, significand m with its leading 1 at bit 62 ---------------------
 * A finite non-zero number is m * 2^(e - 62), m in [2^62, 2^63). Bit 63 is headroom for an addition's carry;
 * the bits below the kept precision are guard bits (plus a sticky bit 0) for rounding. Exponents are i64 and
 * stay far from overflow. */

/* Unpack a finite non-zero f64 (subnormals are normalised). */
SF_INLINE u64 unpack64(u64 a, i64 *e)
{
	u64 exp = (a >> 52) & 0x7FF;
	u64 normal = b_nz(exp);
	u64 m = (a & F64_FRAC) | (normal << 52);
	u64 s = clz64(m) - 1; /* 10 for a normal number */
	*e = (i64)(exp + (normal ^ 1)) - 1023 + 10 - (i64)s; /* a subnormal's exponent field counts as 1 */
	return m << s;
}

/* Round m * 2^(e - 62) (leading 1 at bit 62, sticky in bit 0) to binary64, nearest even; overflow -> inf. */
SF_INLINE u64 round_pack64(u64 sign, i64 e, u64 m)
{
	i64 biased = e + 1023;
	u64 ovf = b_lt(2046, (u64)biased); /* biased >= 2047 */
	u64 sub = b_lt((u64)biased, 1); /* biased <= 0: subnormal (or underflow to zero) */
	m = shr_sticky(m, sub * clamp63((u64)(1 - biased)));
	biased = (i64)sel(sub, 0, (u64)biased);
	u64 rb = m & 0x3FF;
	m >>= 10;
	m += b_lt(0x200, rb) | ((b_nz(rb ^ 0x200) ^ 1) & m & 1); /* above half, or a tie and m odd */
	/* A normal significand carries its implicit bit at 52, so the exponent field is biased - 1 plus that bit;
	 * a rounding carry out of the significand then bumps the exponent by itself (up to inf, correctly). A
	 * subnormal (biased 0) adds nothing: its rounded significand is the whole encoding. */
	u64 bits = ((u64)(biased - (i64)(sub ^ 1)) << 52) + m;
	return sign | sel(ovf, F64_EXP, bits);
}

/* The same into binary32 (24-bit significand: 39 guard bits). */
SF_INLINE u64 round_pack32(u64 sign, i64 e, u64 m)
{
	i64 biased = e + 127;
	u64 ovf = b_lt(254, (u64)biased);
	u64 sub = b_lt((u64)biased, 1);
	m = shr_sticky(m, sub * clamp63((u64)(1 - biased)));
	biased = (i64)sel(sub, 0, (u64)biased);
	u64 rb = m & 0x7FFFFFFFFFULL;
	m >>= 39;
	m += b_lt(0x4000000000ULL, rb) | ((b_nz(rb ^ 0x4000000000ULL) ^ 1) & m & 1);
	u64 bits = ((u64)(biased - (i64)(sub ^ 1)) << 23) + m;
	return sign | sel(ovf, F32_EXP, bits);
}

/* Normalise a non-zero m (leading 1 anywhere) to the internal form; the value m * 2^(*e - 62) is kept. */
SF_INLINE u64 normalise(u64 m, i64 *e)
{
	u64 top = m >> 63;
	m = (m >> top) | (m & top);
	u64 s = clz64(m) - 1;
	*e += (i64)top - (i64)s;
	return m << s;
}

/* ---- f32 <-> f64 (non-NaN cores) ----------------------------------------------------------------------- */

SF_INLINE u64 promote_num(u64 a)
{
	u64 sign = (a & F32_SIGN) << 32;
	u64 mag = a & ~F32_SIGN;
	if (mag == 0)
		return sign;
	if (mag == F32_EXP)
		return sign | F64_EXP;
	int exp = mag >> 23;
	u64 frac = mag & F32_FRAC;
	if (exp)
		return sign | ((u64)(exp - 127 + 1023) << 52) | (frac << 29);
	u64 s = clz64(frac) - 40; /* bring the leading 1 to bit 23 */
	return sign | ((897 - s) << 52) | (((frac << s) & F32_FRAC) << 29);
}

SF_INLINE u64 demote_num(u64 a)
{
	u64 sign = (a & F64_SIGN) >> 32;
	u64 mag = a & ~F64_SIGN;
	if (mag == 0)
		return sign;
	if (mag == F64_EXP)
		return sign | F32_EXP;
	i64 e;
	u64 m = unpack64(a, &e);
	return round_pack32(sign, e, m);
}

/* ---- f64 arithmetic on non-NaN operands ------------------------------------------------------------------ */

SF_INLINE u64 add_num(u64 a, u64 b)
{
	u64 ma_ = a & ~F64_SIGN, mb_ = b & ~F64_SIGN;
	if (ma_ == F64_EXP || mb_ == F64_EXP) {
		if (ma_ == mb_ && (a ^ b) >> 63)
			return F64_DEFAULT_NAN; /* inf - inf */
		return ma_ == F64_EXP ? a : b;
	}
	if (ma_ == 0)
		return mb_ == 0 ? (a & b) : b; /* -0 + -0 = -0, any other sum of zeros +0 */
	if (mb_ == 0)
		return a;
	/* order by magnitude (the bit patterns of non-negative numbers sort like their values): |a| >= |b| */
	u64 swap = (a ^ b) * b_lt(ma_, mb_);
	a ^= swap;
	b ^= swap;
	i64 ea, eb;
	u64 ma = unpack64(a, &ea), mb = unpack64(b, &eb);
	mb = shr_sticky(mb, clamp63((u64)(ea - eb)));
	u64 diff = opq((a ^ b) >> 63); /* signs differ: subtract magnitudes */
	u64 m = ma + mb - (mb << 1) * diff;
	if (m == 0)
		return 0; /* exact cancellation is +0 in round-to-nearest */
	m = normalise(m, &ea);
	return round_pack64(a & F64_SIGN, ea, m);
}

SF_INLINE u64 mul_num(u64 a, u64 b)
{
	u64 sign = (a ^ b) & F64_SIGN;
	u64 ma_ = a & ~F64_SIGN, mb_ = b & ~F64_SIGN;
	if (ma_ == F64_EXP || mb_ == F64_EXP) {
		if (ma_ == 0 || mb_ == 0)
			return F64_DEFAULT_NAN; /* 0 * inf */
		return sign | F64_EXP;
	}
	if (ma_ == 0 || mb_ == 0)
		return sign;
	i64 ea, eb;
	u64 x = unpack64(a, &ea) >> 10, y = unpack64(b, &eb) >> 10; /* 53-bit significands */
	/* 53 x 53 -> 106-bit product from 32-bit halves (BPF has no wide multiply) */
	u64 xl = x & 0xFFFFFFFF, xh = x >> 32, yl = y & 0xFFFFFFFF, yh = y >> 32;
	u64 ll = xl * yl, lh = xl * yh, hl = xh * yl, hh = xh * yh;
	u64 mid = (ll >> 32) + (lh & 0xFFFFFFFF) + (hl & 0xFFFFFFFF);
	u64 lo = (ll & 0xFFFFFFFF) | (mid << 32);
	u64 hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
	/* the product is in [2^104, 2^106): keep bits 105..42 with the rest as sticky */
	u64 m = (hi << 22) | (lo >> 42) | b_nz(lo & ((1ULL << 42) - 1));
	i64 e = ea + eb;
	m = normalise(m, &e);
	return round_pack64(sign, e, m);
}

SF_INLINE u64 div_num(u64 a, u64 b)
{
	u64 sign = (a ^ b) & F64_SIGN;
	u64 ma_ = a & ~F64_SIGN, mb_ = b & ~F64_SIGN;
	if (ma_ == F64_EXP)
		return mb_ == F64_EXP ? F64_DEFAULT_NAN : (sign | F64_EXP);
	if (mb_ == F64_EXP)
		return sign;
	if (mb_ == 0)
		return ma_ == 0 ? F64_DEFAULT_NAN : (sign | F64_EXP);
	if (ma_ == 0)
		return sign;
	i64 ea, eb;
	u64 r = unpack64(a, &ea) >> 10, d = unpack64(b, &eb) >> 10; /* both in [2^52, 2^53) */
	u64 below = b_lt(r, d);
	r <<= below;
	i64 e = ea - eb - (i64)below;
	/* long division, 11 quotient bits per step: r < 2d < 2^54 keeps r << 11 within 64 bits */
	u64 q = r / d;
	r -= q * d;
	for (int i = 0; i < 5; i++) {
		u64 t = r << 11;
		u64 qq = t / d;
		r = t - qq * d;
		q = (q << 11) | qq;
	}
	/* q has 56 bits, leading 1 at bit 55 */
	u64 m = (q << 7) | b_nz(r);
	return round_pack64(sign, e, m);
}

SF_INLINE u64 sqrt_num(u64 a)
{
	u64 mag = a & ~F64_SIGN;
	if (mag == 0)
		return a; /* sqrt(+-0) = +-0 */
	if (a & F64_SIGN)
		return F64_DEFAULT_NAN;
	if (mag == F64_EXP)
		return a;
	i64 e;
	u64 x = unpack64(a, &e) >> 10; /* [2^52, 2^53) */
	u64 odd = (u64)e & 1;
	x <<= odd;
	e -= (i64)odd;
	/* digit-by-digit square root of x << 58 (x has at most 54 bits): 56 root bits, two radicand bits per step,
	 * the low 29 pairs being zeros. r stays below 2q + 1 < 2^57, so r - t is negative exactly when r < t. The
	 * step is branch-free: a data-dependent branch here would make the verifier keep every path apart (it
	 * marks branch operands precise), 2^56 of them. */
	u64 q = 0, r = 0;
	_Pragma("clang loop unroll(full)")
	for (int i = 0; i < 56; i++) {
		r = (r << 2) | ((x >> 52) & 3);
		x <<= 2;
		u64 t = (q << 2) | 1;
		u64 d = r - t;
		u64 lt = b_lt(r, t);
		r = d + t * lt;
		q = (q << 1) | (lt ^ 1);
	}
	/* root of x * 2^58 is q in [2^55, 2^56): value = q * 2^(e/2 - 55) */
	u64 m = (q << 7) | b_nz(r);
	return round_pack64(0, e >> 1, m); /* e is even */
}

#endif
