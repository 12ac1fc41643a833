/* A thin layer over the vector instructions of the file being compiled, so the
 * vector math is written once (templates/vmath_impl.h) for AVX-512 and AVX2.
 *
 * vf: VW floats; vi: VW int32; vm: a lane mask; vd: VW / 2 doubles, the
 * widened low (vlo_d) or high (vhi_d) half of a vf. vfma(a, b, c) = a * b + c,
 * vfnma(a, b, c) = c - a * b. */
#ifndef CANDLE_CPU_SIMD_H
#define CANDLE_CPU_SIMD_H

#include <immintrin.h>

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vm;
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vset1(float x) { return _mm512_set1_ps(x); }
static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
static inline vf vsqrt(vf a) { return _mm512_sqrt_ps(a); }
static inline vf vabs(vf a) { return _mm512_abs_ps(a); }
static inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vm vlt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vm vge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline vm vgt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vm visnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vm vor_m(vm a, vm b) { return (vm)(a | b); }
static inline vm vnot_m(vm a) { return (vm)~a; }
static inline int vany(vm m) { return m != 0; }
static inline unsigned vbits(vm m) { return m; }
static inline vf vselect(vm m, vf if_true, vf if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
static inline float vhsum(vf a) { return _mm512_reduce_add_ps(a); }
static inline float vhmax(vf a) { return _mm512_reduce_max_ps(a); }
static inline float vhmin(vf a) { return _mm512_reduce_min_ps(a); }
static inline vi vcast_i(vf a) { return _mm512_castps_si512(a); }
static inline vf vcast_f(vi a) { return _mm512_castsi512_ps(a); }
static inline vi vcvt_i(vf a) { return _mm512_cvtps_epi32(a); }
static inline vi vadd_i(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vi vsub_i(vi a, vi b) { return _mm512_sub_epi32(a, b); }
static inline vi vand_i(vi a, vi b) { return _mm512_and_si512(a, b); }
static inline vi vor_i(vi a, vi b) { return _mm512_or_si512(a, b); }
static inline vi vset1_i(int x) { return _mm512_set1_epi32(x); }
#define vsll_i(a, n) _mm512_slli_epi32((a), (n))
#define vsrl_i(a, n) _mm512_srli_epi32((a), (n))
#define vsra_i(a, n) _mm512_srai_epi32((a), (n))
static inline vf vcvt_f(vi a) { return _mm512_cvtepi32_ps(a); }
typedef __m512d vd;
static inline vd vzero_d(void) { return _mm512_setzero_pd(); }
static inline vd vadd_d(vd a, vd b) { return _mm512_add_pd(a, b); }
static inline vd vlo_d(vf a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
static inline vd vhi_d(vf a) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)); }
static inline double vhsum_d(vd a) { return _mm512_reduce_add_pd(a); }

#elif defined(__AVX2__)
#define VW 8
typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vm;
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vset1(float x) { return _mm256_set1_ps(x); }
static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vfnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vf vsqrt(vf a) { return _mm256_sqrt_ps(a); }
static inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vm vlt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vm vge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vm vgt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vm visnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline vm vor_m(vm a, vm b) { return _mm256_or_ps(a, b); }
static inline vm vnot_m(vm a) { return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1))); }
static inline int vany(vm m) { return _mm256_movemask_ps(m) != 0; }
static inline unsigned vbits(vm m) { return (unsigned)_mm256_movemask_ps(m); }
static inline vf vselect(vm m, vf if_true, vf if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
static inline float vhsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmax(vf a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmin(vf a) {
    __m128 s = _mm_min_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_min_ps(s, _mm_movehl_ps(s, s));
    s = _mm_min_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline vi vcast_i(vf a) { return _mm256_castps_si256(a); }
static inline vf vcast_f(vi a) { return _mm256_castsi256_ps(a); }
static inline vi vcvt_i(vf a) { return _mm256_cvtps_epi32(a); }
static inline vi vadd_i(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline vi vsub_i(vi a, vi b) { return _mm256_sub_epi32(a, b); }
static inline vi vand_i(vi a, vi b) { return _mm256_and_si256(a, b); }
static inline vi vor_i(vi a, vi b) { return _mm256_or_si256(a, b); }
static inline vi vset1_i(int x) { return _mm256_set1_epi32(x); }
#define vsll_i(a, n) _mm256_slli_epi32((a), (n))
#define vsrl_i(a, n) _mm256_srli_epi32((a), (n))
#define vsra_i(a, n) _mm256_srai_epi32((a), (n))
static inline vf vcvt_f(vi a) { return _mm256_cvtepi32_ps(a); }
typedef __m256d vd;
static inline vd vzero_d(void) { return _mm256_setzero_pd(); }
static inline vd vadd_d(vd a, vd b) { return _mm256_add_pd(a, b); }
static inline vd vlo_d(vf a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
static inline vd vhi_d(vf a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
static inline double vhsum_d(vd a) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

#else
#error "simd.h needs AVX2 or AVX-512"
#endif

#endif
