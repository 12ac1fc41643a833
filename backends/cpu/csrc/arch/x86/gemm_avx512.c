/* GEMM microkernels for AVX-512 (the driver is templates/gemm_impl.h).
 *
 * f32: a 14 x 32 tile in 28 zmm accumulators; per k, two B vectors and one
 * broadcast of A per row, 28 FMAs. f64: 14 x 16 likewise. Edge tiles store
 * through masks; tiles of fewer rows run a shorter kernel. C is prefetched
 * before the K loop (+3% at 2048). The body is written once over the element
 * suffix S of the intrinsics (ps, pd) and instantiated for both. */
#include <immintrin.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define OP(op, S) _mm512_##op##_##S
#define VEC_ps __m512
#define VEC_pd __m512d
#define VEC_(S) VEC_##S
#define VEC(S) VEC_(S)
/* Rows from 7 on are addressed from a second pointer a7 = a + 7 * ars: the
 * offsets are then 0..6 strides, which scaled addressing covers with four
 * registers (fourteen would spill inside the loop). */
#define A_AT(i) ((i) < 7 ? a[(i) * ars] : a7[((i) - 7) * ars])
#include "arch/x86/gemm_micro.h"

#define LANES(S) ((int)(64 / sizeof(ELEM(S))))

#define STORE_PART(i, S)                                                       \
    if ((i) < mr) {                                                            \
        ELEM(S) *ci = c + (i) * ldc;                                           \
        if (accumulate) {                                                      \
            c##i##_0 = OP(add, S)(c##i##_0, OP(maskz_loadu, S)(m0, ci));       \
            c##i##_1 = OP(add, S)(c##i##_1, OP(maskz_loadu, S)(m1, ci + W));   \
        }                                                                      \
        OP(mask_storeu, S)(ci, m0, c##i##_0);                                  \
        OP(mask_storeu, S)(ci + W, m1, c##i##_1);                              \
    }
/* The tile body: accumulates kc steps of A (row i at a[i * ars], the next k
 * acs further on) times B (rows ldb apart, two vectors of BT loaded by BLOAD,
 * multiplied in by STEPM), then stores or adds the tile. */
#define MICRO_BODY_WITH(R, S, ACS, BT, BLOAD, STEPM, SAVE)                                      \
    const int W = LANES(S);                                                                     \
    ROWS##R(PREF, S)                                                                            \
    ROWS##R(DECL, S)                                                                            \
    const __typeof__(*a) *a7 = a + 7 * ars;                                                     \
    for (int64_t p = 0; p < kc; p++, a += (ACS), a7 += (ACS), b += ldb) {                       \
        const BT b0 = BLOAD(b), b1 = BLOAD(b + W);                                              \
        SAVE(S)                                                                                 \
        ROWS##R(STEPM, S)                                                                       \
    }                                                                                           \
    if (mr == R && nr == 2 * W) {                                                               \
        ROWS##R(STORE_FULL, S)                                                                  \
    } else {                                                                                    \
        const unsigned full = (1u << W) - 1;                                                    \
        const unsigned m0 = nr >= W ? full : (1u << nr) - 1;                                    \
        const unsigned m1 = nr >= 2 * W ? full : nr > W ? (1u << (nr - W)) - 1 : 0;             \
        ROWS##R(STORE_PART, S)                                                                  \
    }
#define MICRO_BODY_SAVE(R, S, ACS, SAVE) MICRO_BODY_WITH(R, S, ACS, VEC(S), OP(loadu, S), STEP, SAVE)
#define MICRO_BODY(R, S, ACS) MICRO_BODY_SAVE(R, S, ACS, NO_SAVE)
/* Kernels of 14, 8, 4 and 2 rows over packed panels (always 14 wide), so an edge panel of a
 * few rows costs a few rows' work; the entry that picks one; the in-place kernel; the two
 * that pack B as they go. */
#define GEN_MICROS(NAME, S)                                                                     \
    GEN_MICRO(NAME, 14, S, 14) GEN_MICRO(NAME, 8, S, 14) GEN_MICRO(NAME, 4, S, 14)               \
    GEN_MICRO(NAME, 2, S, 14)                                                                     \
    static void NAME(int64_t kc, const ELEM(S) *a, const ELEM(S) *b, int64_t ldb, ELEM(S) *c,     \
                     int64_t ldc, int mr, int nr, int acc) {                                      \
        if (mr > 8) NAME##_14(kc, a, b, ldb, c, ldc, mr, nr, acc);                                \
        else if (mr > 4) NAME##_8(kc, a, b, ldb, c, ldc, mr, nr, acc);                            \
        else if (mr > 2) NAME##_4(kc, a, b, ldb, c, ldc, mr, nr, acc);                            \
        else NAME##_2(kc, a, b, ldb, c, ldc, mr, nr, acc);                                        \
    }                                                                                             \
    __attribute__((noinline)) /* inlined, its row offsets would spill */                        \
    GEN_MICRO_ROWS(NAME, 14, S)                                                                   \
    GEN_MICRO_PACKING(NAME, 14, S, 14)

GEN_MICROS(micro_f32, ps)
GEN_MICROS(micro_f64, pd)

/* ---- transposing pack: dst[p * W + i] = src[i * ld + p], i < w <= W, p < kc ----
 * 16 x 16 blocks transposed in registers; rows past w are zero. */
static inline void transpose16(__m512 *r) {
    __m512 t[16], u[16], v[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            v[8 * h + i] = _mm512_shuffle_f32x4(u[8 * h + i], u[8 * h + 4 + i], 0x88);
            v[8 * h + 4 + i] = _mm512_shuffle_f32x4(u[8 * h + i], u[8 * h + 4 + i], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(v[i], v[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(v[i], v[8 + i], 0xdd);
    }
}

static void tpack_f32(const float *src, int64_t ld, int w, int64_t kc, int W, float *dst) {
    for (int i0 = 0; i0 < W; i0 += 16) {
        const int rows = CD_MAX(0, CD_MIN(16, w - i0));
        const __mmask16 lanes = (__mmask16)((1u << CD_MIN(16, W - i0)) - 1);
        for (int64_t p0 = 0; p0 < kc; p0 += 16) {
            const int cols = (int)CD_MIN(16, kc - p0);
            const __mmask16 m = (__mmask16)((1u << cols) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + (i0 + i) * ld + p0) : _mm512_setzero_ps();
            transpose16(r);
            for (int j = 0; j < cols; j++) _mm512_mask_storeu_ps(dst + (p0 + j) * W + i0, lanes, r[j]);
        }
    }
}

/* ---- bf16 x bf16 with AVX512-BF16 ------------------------------------------------
 * vdpbf16ps adds the products of a pair of bf16 per f32 lane, so panels hold
 * pairs along k: A's as one 32-bit word per row and k pair (broadcast), B's as
 * 16 columns' pairs per vector. Twice the flops of an f32 FMA per instruction.
 * Products of bf16 are exact in f32; denormal inputs and results flush to zero
 * (the instruction's rule). Compiled for that extension alone: the driver
 * calls it only when the CPU has it (cd_ops.bf16_dot). */
#define BF16_STEP(i, S)                                                          \
    {                                                                            \
        const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)A_AT(i));          \
        c##i##_0 = _mm512_dpbf16_ps(c##i##_0, ai, b0);                           \
        c##i##_1 = _mm512_dpbf16_ps(c##i##_1, ai, b1);                           \
    }
#define LOAD_BF16_PAIRS(p) ((__m512bh)_mm512_loadu_si512(p))
/* kc: k pairs. */
__attribute__((target("avx512bf16"))) static void micro_bf16(int64_t kc, const uint32_t *restrict a,
                                                              const uint32_t *restrict b, int64_t ldb,
                                                              float *restrict c, int64_t ldc, int mr, int nr,
                                                              int accumulate) {
    const int64_t ars = 1;
    MICRO_BODY_WITH(14, ps, 14, __m512bh, LOAD_BF16_PAIRS, BF16_STEP, NO_SAVE)
}

/* The 32-bit word holding elements k and k + 1 of a bf16 vector with stride s
 * (k + 1 past the end reads as zero). */
static inline uint32_t bf16_pair(const uint16_t *v, int64_t s, int64_t k, int64_t kc) {
    return v[k * s] | (k + 1 < kc ? (uint32_t)v[(k + 1) * s] << 16 : 0);
}

/* A panels: dst[q * 14 + r] = row r's pair q; rows past mc are zero. */
static void pack_a_bf16_pairs(const void *src, int64_t rs, int64_t cs, int64_t mc, int64_t kc, uint32_t *dst) {
    const uint16_t *a = src;
    const int64_t kp = (kc + 1) / 2;
    for (int64_t i = 0; i < mc; i += 14, dst += 14 * kp) {
        const int64_t mr = CD_MIN(14, mc - i);
        for (int64_t q = 0; q < kp; q++)
            for (int64_t r = 0; r < 14; r++) dst[q * 14 + r] = r < mr ? bf16_pair(a + (i + r) * rs, cs, 2 * q, kc) : 0;
    }
}

/* B panels: dst[q * 32 + j] = column j's pair q; columns past nc are zero. Two
 * rows of a row-major B interleave with one permute per 16 columns. */
static void pack_b_bf16_pairs(const void *src, int64_t rs, int64_t cs, int64_t kc, int64_t nc, uint32_t *dst) {
    const uint16_t *b = src;
    const int64_t kp = (kc + 1) / 2;
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                        37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t j = 0; j < nc; j += 32, dst += 32 * kp) {
        const int64_t nr = CD_MIN(32, nc - j);
        for (int64_t q = 0; q < kp; q++) {
            if (cs == 1 && nr == 32 && 2 * q + 1 < kc) {
                const __m512i r0 = _mm512_loadu_si512(b + 2 * q * rs + j), r1 = _mm512_loadu_si512(b + (2 * q + 1) * rs + j);
                _mm512_storeu_si512(dst + q * 32, _mm512_permutex2var_epi16(r0, lo, r1));
                _mm512_storeu_si512(dst + q * 32 + 16, _mm512_permutex2var_epi16(r0, hi, r1));
                continue;
            }
            for (int64_t col = 0; col < 32; col++)
                dst[q * 32 + col] = col < nr ? bf16_pair(b + (j + col) * cs, rs, 2 * q, kc) : 0;
        }
    }
}

#define GEMM_BF16_DOT 1
#define GEMM_ENTRY cd_gemm_avx512
/* A deep K slice amortizes the C tile updates; MC and NC follow the caches. */
#define F32_MR 14
#define F32_NR 32
#define F32_KC 1024
#define F64_MR 14
#define F64_NR 16
#define F64_KC 512
#include "templates/gemm_impl.h"
