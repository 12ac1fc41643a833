/* The packed-weight kernels (templates/qpacked_impl.h) on 512-bit vectors
 * with AVX-512 VNNI: one vpdpbusd adds 4 products to each of 16 rows. */
#pragma GCC target("avx512vnni")
#include <immintrin.h>
#include <string.h>

#include "arch/x86/isa_x86.h"

typedef __m512i qp_i;
typedef __m512 qp_f;
#define QP_VNNI 1
#define QP_MR 4
#define QP_PREFETCH_K 16384 /* see templates/qpacked_impl.h */
#define QPACKED_FILL cd_qpacked_avx512vnni

static inline qp_i qp_zero(void) { return _mm512_setzero_si512(); }
static inline qp_i qp_load(const void *p) { return _mm512_loadu_si512(p); }
static inline qp_i qp_and(qp_i a, qp_i b) { return _mm512_and_si512(a, b); }
static inline qp_i qp_or(qp_i a, qp_i b) { return _mm512_or_si512(a, b); }
static inline qp_i qp_xor(qp_i a, qp_i b) { return _mm512_xor_si512(a, b); }
static inline qp_i qp_srli4(qp_i a) { return _mm512_srli_epi16(a, 4); }
static inline qp_i qp_set1_8(char c) { return _mm512_set1_epi8(c); }
static inline qp_i qp_set1_32(int v) { return _mm512_set1_epi32(v); }
static inline qp_i qp_add32(qp_i a, qp_i b) { return _mm512_add_epi32(a, b); }
static inline qp_i qp_sub32(qp_i a, qp_i b) { return _mm512_sub_epi32(a, b); }
/* 4 bytes broadcast to every lane. */
static inline qp_i qp_bcast4(const void *p) {
    int v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
/* A 16-byte table in every 128-bit lane, and bytes looked up in it by their low 4 bits. */
static inline qp_i qp_table16(const int8_t *t) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t)); }
static inline qp_i qp_shuffle(qp_i table, qp_i idx) { return _mm512_shuffle_epi8(table, idx); }
/* 16 in each byte whose bit is set in the 64-bit little-endian mask at p. */
static inline qp_i qp_bits16(const void *p) {
    unsigned long long m;
    memcpy(&m, p, 8);
    return _mm512_maskz_mov_epi8(_cvtu64_mask64(m), _mm512_set1_epi8(16));
}
#define QP_BARRIER(v) __asm__("" : "+v"(v)) /* see qpacked_avx2.c; only in code for signed levels */
/* acc + u1 . s1 + u2 . s2, over each lane's 4 bytes: unsigned u, signed s. */
static inline qp_i qp_dp2(qp_i acc, qp_i u1, qp_i s1, qp_i u2, qp_i s2) {
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, u1, s1), u2, s2);
}
static inline qp_i qp_dp2_signed(qp_i acc, qp_i x1, qp_i y1, qp_i x2, qp_i y2) { /* unused with VNNI */
    return qp_dp2(acc, x1, y1, x2, y2);
}
static inline qp_i qp_srli32(qp_i a, int n) { return _mm512_srli_epi32(a, (unsigned)n); }
static inline qp_i qp_srai32(qp_i a, int n) { return _mm512_srai_epi32(a, (unsigned)n); }
static inline qp_i qp_slli32(qp_i a, int n) { return _mm512_slli_epi32(a, (unsigned)n); }
static inline qp_i qp_mullo(qp_i a, qp_i b) { return _mm512_mullo_epi32(a, b); }
static inline qp_i qp_from_u8(__m128i b) { return _mm512_cvtepu8_epi32(b); }
static inline qp_i qp_from_u16(const void *p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)); }
static inline void qp_store_i(int32_t *p, qp_i v) { _mm512_storeu_si512(p, v); }
static inline qp_f qp_zerof(void) { return _mm512_setzero_ps(); }
static inline qp_f qp_f16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
/* 16 E8M0 bytes as MXFP4's scales (cd_e8m0_to_f32_half). */
static inline qp_f qp_e8m0(const void *p) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
}
static inline qp_f qp_cvt(qp_i a) { return _mm512_cvtepi32_ps(a); }
static inline qp_f qp_set1f(float v) { return _mm512_set1_ps(v); }
static inline qp_f qp_mul(qp_f a, qp_f b) { return _mm512_mul_ps(a, b); }
static inline qp_f qp_fma(qp_f a, qp_f b, qp_f c) { return _mm512_fmadd_ps(a, b, c); }
static inline void qp_store(float *p, qp_f v) { _mm512_storeu_ps(p, v); }

#include "templates/qpacked_impl.h"
