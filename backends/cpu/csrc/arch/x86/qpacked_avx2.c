/* The packed-weight kernels (templates/qpacked_impl.h) on AVX2: a 16-lane
 * vector is two 256-bit halves (rows 0-7, 8-15), and a 4-byte dot product is
 * vpmaddubsw (pairs of byte products in 16 bits) then vpmaddwd; levels below
 * 16 add a whole block's (sub-block's) pair sums in 16 bits before the one
 * vpmaddwd (below 32, two steps' of a block), which also applies Q4_K's 6-bit
 * scale (IQ4_XS's: to each run's pair sums). */
#include <immintrin.h>
#include <string.h>

#include "arch/x86/isa_x86.h"

typedef struct { __m256i lo, hi; } qp_i;
typedef struct { __m256 lo, hi; } qp_f;
#define QP_VNNI 0
#define QP_MR 2 /* 16 ymm registers */
/* Prefetch (see templates/qpacked_impl.h): Zen 1's in the copy of these kernels that qpacked_zen1_avx2.c
 * compiles, Zen 4's in this one (every other AVX2 core's, unmeasured there). */
#define QP_PREFETCH_32 16384
#ifdef QP_ZEN1
#define QP_PREFETCH_RUNS 4096
#define QP_PREFETCH_Q8 8192
#define QPACKED_FILL cd_qpacked_zen1_avx2
#else
#define QP_PREFETCH_K 16384
#define QPACKED_FILL cd_qpacked_avx2
#endif
#define QP_ACC16 1        /* qp_dp1_16 and qp_widen16 */
/* The 4-bit types' decode kernels (one row of activations) scheduled by gcc before register allocation,
 * minding register pressure: otherwise they load all of a block's levels first and spill (9-25% slower on
 * L2-resident tiles of Q4_0, Q4_1 and Q4_K), where the same scheduling slows passes of 2 rows as much. */
#if defined(__clang__) /* no per-function optimize attribute: the kernels as compiled */
#define QP_DECODE_ATTR __attribute__((noinline))
#else
#define QP_DECODE_ATTR __attribute__((noinline, optimize("schedule-insns", "sched-pressure")))
#endif

/* v in registers here: gcc does not move the sums of a chain of signed products past it, where it otherwise
 * computes all the products first and spills them (IQ4_XS's decode loop: 48 spill loads and stores in 315
 * instructions). */
#define QP_BARRIER(v) __asm__("" : "+x"((v).lo), "+x"((v).hi))
#define QP_EACH(f) {f(a.lo), f(a.hi)}
#define QP_EACH2(f) {f(a.lo, b.lo), f(a.hi, b.hi)}

static inline qp_i qp_zero(void) { return (qp_i){_mm256_setzero_si256(), _mm256_setzero_si256()}; }
static inline qp_i qp_load(const void *p) {
    return (qp_i){_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1)};
}
static inline qp_i qp_and(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_and_si256); }
static inline qp_i qp_or(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_or_si256); }
static inline qp_i qp_xor(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_xor_si256); }
static inline qp_i qp_add32(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_add_epi32); }
static inline qp_i qp_sub32(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_sub_epi32); }
static inline qp_i qp_srli4(qp_i a) { return (qp_i){_mm256_srli_epi16(a.lo, 4), _mm256_srli_epi16(a.hi, 4)}; }
static inline qp_i qp_set1_8(char c) { return (qp_i){_mm256_set1_epi8(c), _mm256_set1_epi8(c)}; }
static inline qp_i qp_set1_32(int v) { return (qp_i){_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
static inline qp_i qp_set1_16(short v) { return (qp_i){_mm256_set1_epi16(v), _mm256_set1_epi16(v)}; }
static inline qp_i qp_bcast4(const void *p) {
    int v;
    memcpy(&v, p, 4);
    return qp_set1_32(v);
}
static inline qp_i qp_table16(const int8_t *t) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
    return (qp_i){v, v};
}
static inline qp_i qp_shuffle(qp_i table, qp_i idx) {
    return (qp_i){_mm256_shuffle_epi8(table.lo, idx.lo), _mm256_shuffle_epi8(table.hi, idx.hi)};
}
/* 32 bits as 32 bytes, 16 where the bit is set. */
static inline __m256i bits32(uint32_t x) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x),
                                               _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                                 0x0101010101010101LL, 0));
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), _mm256_set1_epi8(16));
}
static inline qp_i qp_bits16(const void *p) {
    uint32_t m[2];
    memcpy(m, p, 8);
    return (qp_i){bits32(m[0]), bits32(m[1])};
}
/* acc + u1 . s1 + u2 . s2 with unsigned u < 64: the two byte-pair sums add in 16 bits without overflow. */
static inline __m256i dp2(__m256i acc, __m256i u1, __m256i s1, __m256i u2, __m256i s2) {
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u1, s1), _mm256_maddubs_epi16(u2, s2));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
static inline qp_i qp_dp2(qp_i acc, qp_i u1, qp_i s1, qp_i u2, qp_i s2) {
    return (qp_i){dp2(acc.lo, u1.lo, s1.lo, u2.lo, s2.lo), dp2(acc.hi, u1.hi, s1.hi, u2.hi, s2.hi)};
}
/* The same for signed x and y (levels of q8 activations, |y| <= 127): x with y's sign times |y|, one vpsignb
 * a vector where |x| and y with x's sign take two, and |y| one vpabsb a broadcast for both halves; each pair
 * sum fits 16 bits, two do not. */
static inline __m256i pairs_signed(__m256i x, __m256i y, __m256i ay) {
    return _mm256_maddubs_epi16(ay, _mm256_sign_epi8(x, y));
}
static inline __m256i dp1_signed(__m256i acc, __m256i x, __m256i y) {
    const __m256i p = pairs_signed(x, y, _mm256_abs_epi8(y));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
static inline qp_i qp_dp2_signed(qp_i acc, qp_i x1, qp_i y1, qp_i x2, qp_i y2) {
    return (qp_i){dp1_signed(dp1_signed(acc.lo, x1.lo, y1.lo), x2.lo, y2.lo),
                  dp1_signed(dp1_signed(acc.hi, x1.hi, y1.hi), x2.hi, y2.hi)};
}
static inline qp_i qp_srli32(qp_i a, int n) { return (qp_i){_mm256_srli_epi32(a.lo, n), _mm256_srli_epi32(a.hi, n)}; }
static inline qp_i qp_srai32(qp_i a, int n) { return (qp_i){_mm256_srai_epi32(a.lo, n), _mm256_srai_epi32(a.hi, n)}; }
static inline qp_i qp_slli32(qp_i a, int n) { return (qp_i){_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)}; }
static inline qp_i qp_mullo(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_mullo_epi32); }
/* acc + u . s in 16-bit lanes (each the sum of 2 byte products): with unsigned u <= 15 and any s, 8 such
 * pair sums add to at most 8 * 2 * 15 * 128 = 30720 (u <= 31: 4 of them), so a block's products add up
 * without a vpmaddwd and a vpaddd for every two vpmaddubsw. */
static inline qp_i qp_dp1_16(qp_i acc, qp_i u, qp_i s) {
    return (qp_i){_mm256_add_epi16(acc.lo, _mm256_maddubs_epi16(u.lo, s.lo)),
                  _mm256_add_epi16(acc.hi, _mm256_maddubs_epi16(u.hi, s.hi))};
}
static inline qp_i qp_madd16(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_madd_epi16); }
/* A qp_dp1_16 accumulator as int32 lanes. */
static inline qp_i qp_widen16(qp_i acc) { return qp_madd16(acc, qp_set1_16(1)); }
/* Two times 16 unsigned bytes as 16-bit pairs: lane r = a[r] | b[r] << 16 (vpmaddwd's operand; a = b puts a
 * byte in both halves of its lane). */
static inline qp_i qp_pairs16(__m128i a, __m128i b) {
    return (qp_i){_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)), _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b))};
}
/* 16-bit lanes: shifts, and subtraction. */
static inline qp_i qp_slli16(qp_i a, int n) { return (qp_i){_mm256_slli_epi16(a.lo, n), _mm256_slli_epi16(a.hi, n)}; }
static inline qp_i qp_srli16(qp_i a, int n) { return (qp_i){_mm256_srli_epi16(a.lo, n), _mm256_srli_epi16(a.hi, n)}; }
static inline qp_i qp_sub16(qp_i a, qp_i b) { return (qp_i)QP_EACH2(_mm256_sub_epi16); }
/* A vpshufb control that puts byte b(i) + k of the source in both 16-bit halves of 32-bit lane i, zero-extended,
 * where b(i) = step * i (within its 128-bit half for the source's own lanes). */
static inline __m256i pair16_control(int k, int step) {
    const __m256i i = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    const __m256i b = _mm256_add_epi32(_mm256_mullo_epi32(i, _mm256_set1_epi32(step)), _mm256_set1_epi32(k));
    return _mm256_or_si256(_mm256_mullo_epi32(b, _mm256_set1_epi32(0x10001)), _mm256_set1_epi32((int)0x80008000u));
}
/* Byte k of each 32-bit lane of v (lane r = row r) in both 16-bit halves of the lane: one vpshufb a half. */
static inline qp_i qp_lane_byte_pair16(qp_i v, int k) {
    const __m256i ctl = _mm256_and_si256(pair16_control(k, 4), _mm256_set1_epi8((char)0x8f)); /* within 128 bits */
    return (qp_i){_mm256_shuffle_epi8(v.lo, ctl), _mm256_shuffle_epi8(v.hi, ctl)};
}
/* Byte k of the 16 2-byte fields at p (row r's at 2r) the same way. */
static inline qp_i qp_u16_byte_pair16(const void *p, int k) {
    const __m256i ctl = pair16_control(k, 2);
    return (qp_i){_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), ctl),
                  _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p + 1)), ctl)};
}
/* x with y's sign times |y| = ay in 16-bit pair sums (|y| <= 127: each fits, see dp1_signed). */
static inline qp_i qp_dp1_signed16(qp_i x, qp_i y, qp_i ay) {
    return (qp_i){pairs_signed(x.lo, y.lo, ay.lo), pairs_signed(x.hi, y.hi, ay.hi)};
}
/* |y| of a broadcast y (the same in both halves): one vpabsb. */
static inline qp_i qp_abs8(qp_i y) {
    const __m256i a = _mm256_abs_epi8(y.lo);
    return (qp_i){a, a};
}
static inline qp_i qp_from_u8(__m128i b) { return (qp_i){_mm256_cvtepu8_epi32(b), _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))}; }
static inline qp_i qp_from_u16(const void *p) {
    return (qp_i){_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)),
                  _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p + 1))};
}
static inline void qp_store_i(int32_t *p, qp_i v) {
    _mm256_storeu_si256((__m256i *)p, v.lo);
    _mm256_storeu_si256((__m256i *)p + 1, v.hi);
}
static inline qp_f qp_zerof(void) { return (qp_f){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline qp_f qp_f16(const void *p) {
    return (qp_f){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1))};
}
static inline __m256 e8m0x8(__m128i bytes) {
    const __m256i e = _mm256_cvtepu8_epi32(bytes);
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
}
static inline qp_f qp_e8m0(const void *p) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    return (qp_f){e8m0x8(b), e8m0x8(_mm_srli_si128(b, 8))};
}
static inline qp_f qp_cvt(qp_i a) { return (qp_f){_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
static inline qp_f qp_set1f(float v) { return (qp_f){_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
static inline qp_f qp_mul(qp_f a, qp_f b) { return (qp_f)QP_EACH2(_mm256_mul_ps); }
static inline qp_f qp_fma(qp_f a, qp_f b, qp_f c) {
    return (qp_f){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline void qp_store(float *p, qp_f v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}

#include "templates/qpacked_impl.h"
