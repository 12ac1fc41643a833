/* Vector math, written once over the vector layer of simd.h and compiled per
 * instruction set (arch/x86/vmath_avx512.c, vmath_avx2.c). The including file
 * has included its simd.h and defines VMATH_FILL, the name of the function
 * that puts these loops into the ISA table. The half-precision conversions
 * below use the x86 conversion instructions directly.
 *
 * Maximum errors against float64 over dense sweeps, as the conformance suite
 * measures them (candle_api/testing/conformance/test_vector_math.py): exp 1.0,
 * log 1.2, tanh 1.2, sigmoid 2.3, silu 2.4, erf 2.3, gelu_erf 5.8 ulp; gelu
 * 9.8 ulp for x >= -3 and a relative error below 6e-6 further out (float32
 * rounding of its cubic argument, amplified by the exponential).
 * Polynomials come from tools/fit_vmath.py. Lanes with inputs outside a
 * function's fast range (NaN, overflow, subnormal results) are recomputed with
 * the C library, so special values keep their IEEE answers. */
#include <float.h>
#include <math.h>

#include "runtime/internal.h"
#include "runtime/isa.h"
#include "templates/vmath_coeffs.h"

static inline vf vpoly(vf x, const float *c, int n) {
    vf acc = vset1(c[n - 1]);
    for (int i = n - 2; i >= 0; i--) acc = vfma(acc, x, vset1(c[i]));
    return acc;
}

/* Recomputes the lanes of y flagged in `special` with the scalar function. */
static inline vf fixup(vm special, vf x, vf y, float (*scalar)(float)) {
    unsigned bits = vbits(special);
    if (!bits) return y;
    float xs[VW], ys[VW];
    vstore(xs, x);
    vstore(ys, y);
    for (int i = 0; i < VW; i++)
        if (bits >> i & 1u) ys[i] = scalar(xs[i]);
    return vload(ys);
}

static inline vf vcopysign(vf magnitude, vf sign) {
    return vcast_f(vor_i(vand_i(vcast_i(magnitude), vset1_i(0x7fffffff)),
                         vand_i(vcast_i(sign), vset1_i((int)0x80000000u))));
}

/* exp for x in [-87, 88.3]: 2^n * e^r with |r| <= ln2/2. */
static inline vf vexp_core(vf x) {
    vf n = vround(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfnma(n, vset1(0.693359375f), x); /* ln2 split in two so n * hi is exact */
    r = vfnma(n, vset1(-2.12194440e-4f), r);
    vf t = vfma(vmul(r, r), vpoly(r, EXP_Q, 5), r);
    vf p = vadd(t, vset1(1.0f));
    return vcast_f(vadd_i(vcast_i(p), vsll_i(vcvt_i(n), 23)));
}

static inline vf vexp(vf x) {
    vm special = vor_m(vor_m(vlt(x, vset1(-87.0f)), vgt(x, vset1(88.3f))), visnan(x));
    return fixup(special, x, vexp_core(x), expf);
}

static inline vf vlog(vf x) {
    vm special = vor_m(vnot_m(vge(x, vset1(FLT_MIN))), vgt(x, vset1(FLT_MAX)));
    vi bits = vcast_i(x);
    vf e = vcvt_f(vsub_i(vsrl_i(bits, 23), vset1_i(127)));
    vf m = vcast_f(vor_i(vand_i(bits, vset1_i(0x007fffff)), vset1_i(0x3f800000))); /* [1, 2) */
    vm big = vgt(m, vset1(1.41421356f));
    m = vselect(big, vmul(m, vset1(0.5f)), m);
    e = vselect(big, vadd(e, vset1(1.0f)), e);
    vf f = vsub(m, vset1(1.0f)), f2 = vmul(f, f);
    vf y = vfma(vmul(f2, f), vpoly(f, LOG_P, 8), vfnma(vset1(0.5f), f2, f));
    vf out = vfma(e, vset1(0.693359375f), vfma(e, vset1(-2.12194440e-4f), y));
    return fixup(special, x, out, logf);
}

/* tanh of numbers (NaN lanes: anything). */
static inline vf vtanh_core(vf x) {
    vf a = vabs(x), x2 = vmul(x, x);
    vf small = vfma(vmul(x2, x), vpoly(x2, TANH_P, 6), x);
    vf e = vexp_core(vmin(vadd(a, a), vset1(40.0f)));
    vf big = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(e, vset1(1.0f))));
    /* tanh is odd: the sign of x, -0.0 included. */
    return vcopysign(vselect(vlt(a, vset1(0.625f)), small, big), x);
}

static inline vf vtanh(vf x) { return fixup(visnan(x), x, vtanh_core(x), tanhf); }

/* erfc(a) for a >= 0.5, given a^2 as an exact sum hi + lo: exp(-a^2) amplifies
 * any rounding of a^2 by a^2, so the square must not be rounded. */
static inline vf verfc_big(vf a, vf a2_hi, vf a2_lo) {
    vf u = vdiv(vset1(1.0f), a);
    vf r = vpoly(vfma(u, vset1(ERFC_A), vset1(ERFC_B)), ERFC_R, 16);
    vf e = vmul(vexp(vsub(vzero(), a2_hi)), vsub(vset1(1.0f), a2_lo)); /* exp(-lo) ~ 1 - lo */
    return vmul(vmul(e, r), u);
}

static inline vf verf(vf x) {
    vf a = vabs(x);
    vf small = vmul(x, vpoly(vmul(x, x), ERF_P, 8));
    vf b = vmin(vmax(a, vset1(1.0f)), vset1(10.0f)), b2 = vmul(b, b); /* erfc(10) = 0 in float32 */
    vf big = vcopysign(vsub(vset1(1.0f), verfc_big(b, b2, vfma(b, b, vsub(vzero(), b2)))), x);
    return fixup(visnan(x), x, vselect(vlt(a, vset1(1.0f)), small, big), erff);
}

static inline vf vsigmoid(vf x) { return vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vsub(vzero(), x)))); }

/* sigmoid of numbers (NaN lanes: anything); below -88.3 it stays at sigmoid(-88.3), 4.6e-39, not 0. */
static inline vf vsigmoid_core(vf x) {
    vf e = vexp_core(vmin(vmax(vsub(vzero(), x), vset1(-87.0f)), vset1(88.3f)));
    return vdiv(vset1(1.0f), vadd(vset1(1.0f), e));
}

static inline vf vsilu(vf x) { return vdiv(x, vadd(vset1(1.0f), vexp(vsub(vzero(), x)))); }

/* 0.5 x (1 + tanh(y)) = x sigmoid(2y): no cancellation for negative x. The
 * exponential amplifies the rounding of its argument 2y = t x, so x^2 is
 * carried exactly and the rounding of t x is folded back in as exp(-lo) ~ 1 - lo. */
static inline vf vgelu(vf x) {
    const vf k = vset1(1.5957691216057308f), kc = vset1(1.5957691216057308f * 0.044715f);
    vf xc = vmin(vmax(x, vset1(-20.0f)), vset1(20.0f)); /* sigmoid(2y) is 0 or 1 beyond */
    vf x2 = vmul(xc, xc), x2_lo = vfma(xc, xc, vsub(vzero(), x2));
    vf t = vfma(kc, x2_lo, vfma(kc, x2, k));
    vf arg = vmul(t, xc), arg_lo = vfma(t, xc, vsub(vzero(), arg));
    vf e = vmul(vexp(vsub(vzero(), arg)), vsub(vset1(1.0f), arg_lo));
    return vdiv(x, vadd(vset1(1.0f), e));
}

/* 0.5 x erfc(-x / sqrt2): for |t| >= 1 through erfc, accurate in both tails. */
static float gelu_erf_scalar(float x) { return 0.5f * x * erfcf(-x * 0.70710678f); }

static inline vf vgelu_erf(vf x) {
    vf t = vmul(x, vset1(0.70710678118654752f)), a = vabs(t);
    vf half_x = vmul(x, vset1(0.5f));
    vf small = vmul(half_x, vadd(vset1(1.0f), vmul(t, vpoly(vmul(t, t), ERF_P, 8)))); /* keeps -0.0 */
    /* The polynomial for -0.5 < t < 1 (1 + erf(t) stays above 0.47), erfc elsewhere;
     * t^2 = x^2 / 2 exactly, from x rather than from the rounded t. */
    vm tail = vor_m(vlt(t, vset1(-0.5f)), vge(t, vset1(1.0f)));
    vf xc = vmin(vmax(x, vset1(-20.0f)), vset1(20.0f)); /* erfc(14) = 0 in float32 */
    vf x2 = vmul(xc, xc), x2_lo = vfma(xc, xc, vsub(vzero(), x2));
    vf e = verfc_big(vmin(vmax(a, vset1(0.5f)), vset1(14.2f)), vselect(tail, vmul(x2, vset1(0.5f)), vset1(0.25f)),
                     vselect(tail, vmul(x2_lo, vset1(0.5f)), vzero()));
    vf big = vselect(vgt(t, vzero()), vfnma(half_x, e, x), vmul(half_x, e));
    vm special = vor_m(visnan(x), vgt(a, vset1(FLT_MAX))); /* -inf * 0 is NaN, as in the C library */
    return fixup(special, x, vselect(tail, big, small), gelu_erf_scalar);
}

/* Loops over arrays: full vectors, then the tail through a padded buffer. */
#define VMAP(NAME, VFN)                                                        \
    static int NAME(int64_t n, const void *vx, void *vy) {                     \
        const float *x = vx;                                                   \
        float *y = vy;                                                         \
        int64_t i = 0;                                                         \
        for (; i + VW <= n; i += VW) vstore(y + i, VFN(vload(x + i)));         \
        if (i < n) {                                                           \
            float tx[VW] = {0}, ty[VW];                                        \
            memcpy(tx, x + i, (size_t)(n - i) * sizeof(float));                \
            vstore(ty, VFN(vload(tx)));                                        \
            memcpy(y + i, ty, (size_t)(n - i) * sizeof(float));                \
        }                                                                      \
        return 0;                                                              \
    }
VMAP(map_exp, vexp)
VMAP(map_log, vlog)
VMAP(map_tanh, vtanh)
VMAP(map_erf, verf)
VMAP(map_sigmoid, vsigmoid)
VMAP(map_silu, vsilu)
VMAP(map_gelu, vgelu)
VMAP(map_gelu_erf, vgelu_erf)

/* ---- half precision --------------------------------------------------------------- */
static void f16_to_f32(int64_t n, const uint16_t *src, float *dst) {
    int64_t i = 0;
#if VW == 16
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
#else
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = cd_f16_to_f32(src[i]);
}

static void f32_to_f16(int64_t n, const float *src, uint16_t *dst) {
    int64_t i = 0;
#if VW == 16
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++) dst[i] = cd_f32_to_f16(src[i]);
}

static void bf16_to_f32(int64_t n, const uint16_t *src, float *dst) {
    int64_t i = 0;
#if VW == 16
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i))), 16));
#else
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i))), 16));
#endif
    for (; i < n; i++) dst[i] = cd_bf16_to_f32(src[i]);
}

/* Round to nearest even on the bits (what cd_f32_to_bf16 does), NaN kept quiet. */
static void f32_to_bf16(int64_t n, const float *src, uint16_t *dst) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf v = vload(src + i);
        vi bits = vcast_i(v);
        vi rounded = vsrl_i(vadd_i(bits, vadd_i(vset1_i(0x7fff), vand_i(vsrl_i(bits, 16), vset1_i(1)))), 16);
        vi quiet = vor_i(vsrl_i(bits, 16), vset1_i(0x40));
        vi out = vcast_i(vselect(visnan(v), vcast_f(quiet), vcast_f(rounded)));
#if VW == 16
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(out));
#else
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(packed));
#endif
    }
    for (; i < n; i++) dst[i] = cd_f32_to_bf16(src[i]);
}

#if VW == 16
/* The same with AVX512-BF16's rounding instruction (20% faster in cache).
 * It flushes subnormal inputs to zero and canonicalizes NaNs, so a block
 * holding either keeps the bit rounding above: the result never depends on
 * the instruction set. */
__attribute__((target("avx512bf16"))) static void f32_to_bf16_cvtne(int64_t n, const float *src, uint16_t *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        __m512i mag = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
        __mmask16 subnormal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)),
                                                     _mm512_set1_epi32(0x7fffff));
        __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
        if (subnormal | nan) f32_to_bf16(16, src + i, dst + i);
        else _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(v));
    }
    f32_to_bf16(n - i, src + i, dst + i);
}
#endif

/* ---- fused rows ------------------------------------------------------------------ */
static void softmax_row(const float *x, float *y, int64_t n, int take_log) {
    vf m0 = vset1(-INFINITY), m1 = m0;
    vm nan = vlt(vzero(), vzero()); /* all false */
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) { /* two chains of max */
        const vf u = vload(x + i), v = vload(x + i + VW);
        nan = vor_m(nan, vor_m(visnan(u), visnan(v)));
        m0 = vmax(m0, u);
        m1 = vmax(m1, v);
    }
    for (; i + VW <= n; i += VW) {
        vf v = vload(x + i);
        nan = vor_m(nan, visnan(v));
        m0 = vmax(m0, v);
    }
    float m = vhmax(vmax(m0, m1));
    int any_nan = vany(nan);
    for (; i < n; i++) {
        any_nan |= x[i] != x[i];
        m = x[i] > m ? x[i] : m;
    }
    if (any_nan) {
        for (i = 0; i < n; i++) y[i] = NAN;
        return;
    }
    const vf vm_ = vset1(m);
    vf acc = vzero(), acc1 = vzero();
    float tail = 0;
    for (i = 0; i + 2 * VW <= n; i += 2 * VW) {
        const vf e = vexp(vsub(vload(x + i), vm_)), f = vexp(vsub(vload(x + i + VW), vm_));
        acc = vadd(acc, e);
        acc1 = vadd(acc1, f);
        if (!take_log) {
            vstore(y + i, e);
            vstore(y + i + VW, f);
        }
    }
    for (; i + VW <= n; i += VW) {
        vf e = vexp(vsub(vload(x + i), vm_));
        acc = vadd(acc, e);
        if (!take_log) vstore(y + i, e);
    }
    acc = vadd(acc, acc1);
    for (; i < n; i++) {
        float e = expf(x[i] - m);
        tail += e;
        if (!take_log) y[i] = e;
    }
    float sum = vhsum(acc) + tail;
    if (take_log) {
        const vf shift = vset1(m + logf(sum));
        for (i = 0; i + VW <= n; i += VW) vstore(y + i, vsub(vload(x + i), shift));
        for (; i < n; i++) y[i] = x[i] - (m + logf(sum));
    } else {
        const float inv = 1.0f / sum;
        const vf vinv = vset1(inv);
        for (i = 0; i + VW <= n; i += VW) vstore(y + i, vmul(vload(y + i), vinv));
        for (; i < n; i++) y[i] *= inv;
    }
}

/* layer_norm (rms = 0) or rms_norm (rms = 1) of one row; b may be NULL. */
static void norm_row(const float *x, float *y, int64_t n, const float *w, const float *b, float eps, int rms) {
    int64_t i;
    float mean = 0;
    if (!rms) {
        vf a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
        float tail = 0;
        for (i = 0; i + 4 * VW <= n; i += 4 * VW) { /* four chains: an add's latency is several cycles */
            a0 = vadd(a0, vload(x + i));
            a1 = vadd(a1, vload(x + i + VW));
            a2 = vadd(a2, vload(x + i + 2 * VW));
            a3 = vadd(a3, vload(x + i + 3 * VW));
        }
        for (; i + VW <= n; i += VW) a0 = vadd(a0, vload(x + i));
        for (; i < n; i++) tail += x[i];
        mean = (vhsum(vadd(vadd(a0, a1), vadd(a2, a3))) + tail) / (float)n;
    }
    const vf vmean = vset1(mean);
    vf a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
    float tail = 0;
    for (i = 0; i + 4 * VW <= n; i += 4 * VW) {
        const vf d0 = vsub(vload(x + i), vmean), d1 = vsub(vload(x + i + VW), vmean);
        const vf d2 = vsub(vload(x + i + 2 * VW), vmean), d3 = vsub(vload(x + i + 3 * VW), vmean);
        a0 = vfma(d0, d0, a0);
        a1 = vfma(d1, d1, a1);
        a2 = vfma(d2, d2, a2);
        a3 = vfma(d3, d3, a3);
    }
    for (; i + VW <= n; i += VW) {
        const vf d = vsub(vload(x + i), vmean);
        a0 = vfma(d, d, a0);
    }
    const vf acc = vadd(vadd(a0, a1), vadd(a2, a3));
    for (; i < n; i++) tail += (x[i] - mean) * (x[i] - mean);
    const float scale = 1.0f / sqrtf((vhsum(acc) + tail) / (float)n + eps);
    const vf vscale = vset1(scale);
    for (i = 0; i + VW <= n; i += VW) {
        vf v = vmul(vmul(vsub(vload(x + i), vmean), vscale), vload(w + i));
        vstore(y + i, b ? vadd(v, vload(b + i)) : v);
    }
    for (; i < n; i++) {
        float v = (x[i] - mean) * scale * w[i];
        y[i] = b ? v + b[i] : v;
    }
}

/* Sum of n contiguous floats, accumulated in double (four vector chains). */
static double sum_f32(const float *x, int64_t n) {
    vd a0 = vzero_d(), a1 = vzero_d(), a2 = vzero_d(), a3 = vzero_d();
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        const vf u = vload(x + i), v = vload(x + i + VW);
        a0 = vadd_d(a0, vlo_d(u));
        a1 = vadd_d(a1, vhi_d(u));
        a2 = vadd_d(a2, vlo_d(v));
        a3 = vadd_d(a3, vhi_d(v));
    }
    double tail = 0;
    for (; i < n; i++) tail += x[i];
    return vhsum_d(vadd_d(vadd_d(a0, a1), vadd_d(a2, a3))) + tail;
}

/* The max (or min) of n >= 1 contiguous floats; NaN when any is NaN. */
static float extreme_f32(const float *x, int64_t n, int is_max) {
    vf best = vset1(x[0]);
    vm nan = visnan(best);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        const vf v = vload(x + i);
        best = is_max ? vmax(best, v) : vmin(best, v);
        nan = vor_m(nan, visnan(v));
    }
    if (vany(nan)) return NAN;
    float r = is_max ? vhmax(best) : vhmin(best);
    for (; i < n; i++) {
        if (x[i] != x[i]) return NAN;
        r = is_max ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);
    }
    return r;
}

/* y[i * ldy + j] = x[i] . w[j]: four weight rows at a time share each load of x. */
static void dot_rows_f32(const float *w, int nw, const float *x, int64_t m, int64_t k, float *y, int64_t ldy) {
    const float *w1 = w + (nw > 1) * k, *w2 = w + (nw > 2) * 2 * k, *w3 = w + (nw > 3) * 3 * k;
    for (int64_t i = 0; i < m; i++) {
        const float *xi = x + i * k;
        vf a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
        int64_t p = 0;
        for (; p + VW <= k; p += VW) { /* rows past nw repeat row 0 (harmless loads, results dropped) */
            const vf xv = vload(xi + p);
            a0 = vfma(xv, vload(w + p), a0);
            a1 = vfma(xv, vload(w1 + p), a1);
            a2 = vfma(xv, vload(w2 + p), a2);
            a3 = vfma(xv, vload(w3 + p), a3);
        }
        float s[4] = {vhsum(a0), vhsum(a1), vhsum(a2), vhsum(a3)};
        const float *rows[4] = {w, w1, w2, w3};
        for (int j = 0; j < nw; j++) {
            for (int64_t q = p; q < k; q++) s[j] += xi[q] * rows[j][q];
            y[i * ldy + j] = s[j];
        }
    }
}

/* ---- recurrent cells -------------------------------------------------------------- */
/* w <= VW floats at p (the lanes past w are zeros), and back. */
static inline vf vload_n(const float *p, int64_t w) {
    if (w == VW) return vload(p);
    float t[VW] = {0};
    memcpy(t, p, (size_t)w * sizeof(float));
    return vload(t);
}

static inline void vstore_n(float *p, vf v, int64_t w) {
    if (w == VW) {
        vstore(p, v);
        return;
    }
    float t[VW];
    vstore(t, v);
    memcpy(p, t, (size_t)w * sizeof(float));
}

/* v clipped to [-clip, clip] (clip > 0), NaN kept: the x86 min and max return their second operand
 * when either is NaN. */
static inline vf vclip(vf v, float clip) { return clip > 0 ? vmin(vset1(clip), vmax(vset1(-clip), v)) : v; }

/* VW cells of one row at unit j: the gates from their pre-activations and biases, then c and h.
 * `exact`: through the functions that give NaN lanes their C library answers (a vector with a NaN
 * input takes that path); otherwise through their cores, which keep everything in registers. */
static void lstm_cells_exact(const cd_lstm_step *st, int64_t ap, int64_t at, int64_t j, int64_t w);

static inline __attribute__((always_inline)) void lstm_cells(const cd_lstm_step *st, int64_t ap, int64_t at,
                                                             int64_t j, int64_t w, int exact) {
    vf g[4], p[3] = {vzero(), vzero(), vzero()}, c = vload_n(st->c + at + j, w);
    vm nan = visnan(c);
    for (int k = 0; k < 4; k++) {
        g[k] = vadd(vload_n(st->pre[k] + ap + j, w), vload_n(st->bias[k] + j, w));
        nan = vor_m(nan, visnan(g[k]));
    }
    for (int k = 0; k < 3 && st->peep[0]; k++) {
        p[k] = vload_n(st->peep[k] + j, w);
        nan = vor_m(nan, visnan(p[k]));
    }
    if (!exact && vany(nan)) {
        lstm_cells_exact(st, ap, at, j, w);
        return;
    }
    if (st->peep[0]) {
        g[0] = vfma(p[0], c, g[0]);
        g[1] = vfma(p[1], c, g[1]);
    }
    const vf i = exact ? vsigmoid(vclip(g[0], st->clip)) : vsigmoid_core(vclip(g[0], st->clip));
    const vf f = st->input_forget ? vsub(vset1(1.0f), i)
                 : exact          ? vsigmoid(vclip(g[1], st->clip))
                                  : vsigmoid_core(vclip(g[1], st->clip));
    const vf gg = vclip(g[2], st->clip);
    c = vfma(f, c, vmul(i, exact ? vtanh(gg) : vtanh_core(gg)));
    if (st->peep[0]) g[3] = vfma(p[2], c, g[3]);
    const vf o = exact ? vsigmoid(vclip(g[3], st->clip)) : vsigmoid_core(vclip(g[3], st->clip));
    const vf h = vmul(o, exact ? vtanh(c) : vtanh_core(c));
    vstore_n(st->c + at + j, c, w);
    vstore_n(st->h + at + j, h, w);
    vstore_n(st->y + at + j, h, w);
}

__attribute__((noinline)) static void lstm_cells_exact(const cd_lstm_step *st, int64_t ap, int64_t at, int64_t j,
                                                       int64_t w) {
    lstm_cells(st, ap, at, j, w, 1);
}

/* Two full vectors of cells at j and j + VW without peepholes, clip or input_forget (nn.LSTM's cells),
 * their computations interleaved: each cell's chain (sigmoids, c, tanh(c), h) is serial, two
 * independent ones keep the vector units busy. Either with a NaN input: lstm_cells, one by one. */
static inline __attribute__((always_inline)) void lstm_cells2(const cd_lstm_step *st, int64_t ap, int64_t at,
                                                              int64_t j) {
    vf g[2][4], c[2] = {vload(st->c + at + j), vload(st->c + at + j + VW)}, o[2], t[2];
    vm nan = vor_m(visnan(c[0]), visnan(c[1]));
    for (int v = 0; v < 2; v++) {
        for (int k = 0; k < 4; k++) {
            g[v][k] = vadd(vload(st->pre[k] + ap + j + v * VW), vload(st->bias[k] + j + v * VW));
            nan = vor_m(nan, visnan(g[v][k]));
        }
    }
    if (vany(nan)) {
        lstm_cells(st, ap, at, j, VW, 0);
        lstm_cells(st, ap, at, j + VW, VW, 0);
        return;
    }
    for (int v = 0; v < 2; v++) t[v] = vmul(vsigmoid_core(g[v][0]), vtanh_core(g[v][2]));
    for (int v = 0; v < 2; v++) c[v] = vfma(vsigmoid_core(g[v][1]), c[v], t[v]);
    for (int v = 0; v < 2; v++) o[v] = vmul(vsigmoid_core(g[v][3]), vtanh_core(c[v]));
    for (int v = 0; v < 2; v++) {
        vstore(st->c + at + j + v * VW, c[v]);
        vstore(st->h + at + j + v * VW, o[v]);
        vstore(st->y + at + j + v * VW, o[v]);
    }
}

static void lstm_step_f32(const cd_lstm_step *st) {
    const int plain = !st->peep[0] && !(st->clip > 0) && !st->input_forget;
    for (int64_t r = 0; r < st->rows; r++) {
        int64_t j = 0;
        for (; plain && j + 2 * VW <= st->n; j += 2 * VW) lstm_cells2(st, r * st->ldp, r * st->ld, j);
        for (; j < st->n; j += VW) lstm_cells(st, r * st->ldp, r * st->ld, j, CD_MIN(VW, st->n - j), 0);
    }
}

/* acc (m x n) += p (m x k, rows ldp apart) @ v (k x n, rows ldv apart): each row's columns in registers, 4
 * vectors at a time, across all k; the tail of n one vector at a time, then scalar. */
static void axpy_rows_f32(const float *p, int64_t ldp, int64_t m, int64_t k, const float *v, int64_t ldv, int64_t n,
                          float *acc) {
    for (int64_t i = 0; i < m; i++) {
        const float *pi = p + i * ldp;
        float *ai = acc + i * n;
        int64_t e = 0;
        for (; e + 4 * VW <= n; e += 4 * VW) {
            vf a0 = vload(ai + e), a1 = vload(ai + e + VW), a2 = vload(ai + e + 2 * VW), a3 = vload(ai + e + 3 * VW);
            for (int64_t j = 0; j < k; j++) {
                const float *vj = v + j * ldv + e;
                const vf w = vset1(pi[j]);
                a0 = vfma(w, vload(vj), a0);
                a1 = vfma(w, vload(vj + VW), a1);
                a2 = vfma(w, vload(vj + 2 * VW), a2);
                a3 = vfma(w, vload(vj + 3 * VW), a3);
            }
            vstore(ai + e, a0), vstore(ai + e + VW, a1), vstore(ai + e + 2 * VW, a2), vstore(ai + e + 3 * VW, a3);
        }
        for (; e + VW <= n; e += VW) {
            vf a = vload(ai + e);
            for (int64_t j = 0; j < k; j++) a = vfma(vset1(pi[j]), vload(v + j * ldv + e), a);
            vstore(ai + e, a);
        }
        for (; e < n; e++)
            for (int64_t j = 0; j < k; j++) ai[e] += pi[j] * v[j * ldv + e];
    }
}

void VMATH_FILL(cd_isa_ops *ops) {
    ops->unary_f32[CD_UNARY_exp] = map_exp;
    ops->unary_f32[CD_UNARY_log] = map_log;
    ops->unary_f32[CD_UNARY_tanh] = map_tanh;
    ops->unary_f32[CD_UNARY_erf] = map_erf;
    ops->unary_f32[CD_UNARY_sigmoid] = map_sigmoid;
    ops->unary_f32[CD_UNARY_silu] = map_silu;
    ops->unary_f32[CD_UNARY_gelu] = map_gelu;
    ops->unary_f32[CD_UNARY_gelu_erf] = map_gelu_erf;
    ops->f16_to_f32 = f16_to_f32;
    ops->f32_to_f16 = f32_to_f16;
    ops->bf16_to_f32 = bf16_to_f32;
#if VW == 16
    ops->f32_to_bf16 = ops->bf16_dot ? f32_to_bf16_cvtne : f32_to_bf16;
#else
    ops->f32_to_bf16 = f32_to_bf16;
#endif
    ops->softmax_row = softmax_row;
    ops->norm_row = norm_row;
    ops->sum_f32 = sum_f32;
    ops->extreme_f32 = extreme_f32;
    ops->dot_rows_f32 = dot_rows_f32;
    ops->lstm_step_f32 = lstm_step_f32;
    ops->axpy_rows_f32 = axpy_rows_f32;
}
