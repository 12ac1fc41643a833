/* GEMM microkernels for AVX2 + FMA (the driver is templates/gemm_impl.h).
 *
 * f32: a 6 x 16 tile in 12 ymm accumulators (two B vectors and one broadcast
 * per k, the classic Haswell shape that fits 16 registers); f64: 6 x 8. Edge
 * tiles go through a small buffer. */
#include <immintrin.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define OP(op, S) _mm256_##op##_##S
#define VEC_ps __m256
#define VEC_pd __m256d
#define VEC_(S) VEC_##S
#define VEC(S) VEC_(S)
#define A_AT(i) a[(i) * ars]
#include "arch/x86/gemm_micro.h"

#define SPILL(i, S)                                  \
    OP(storeu, S)(tile + (i) * 2 * W, c##i##_0);     \
    OP(storeu, S)(tile + (i) * 2 * W + W, c##i##_1);
/* The tile body: kc steps of A (row i at a[i * ars], the next k acs further
 * on) times B (rows ldb apart), spilled to a buffer and stored mr x nr. */
#define MICRO_BODY(S, ACS)                                                                       \
    enum { W = 32 / sizeof(ELEM(S)) };                                                             \
    ROWS6(DECL, S)                                                                                 \
    for (int64_t p = 0; p < kc; p++, a += (ACS), b += ldb) {                                       \
        const VEC(S) b0 = OP(loadu, S)(b), b1 = OP(loadu, S)(b + W);                               \
        ROWS6(STEP, S)                                                                             \
    }                                                                                              \
    ELEM(S) tile[6 * 2 * W];                                                                       \
    ROWS6(SPILL, S)                                                                                \
    for (int i = 0; i < mr; i++)                                                                   \
        for (int j = 0; j < nr; j++)                                                               \
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * 2 * W + j] : tile[i * 2 * W + j];
#define GEN_MICRO(NAME, S)                                                                       \
    /* A packed A panel (6 wide). */                                                               \
    static void NAME(int64_t kc, const ELEM(S) *restrict a, const ELEM(S) *restrict b, int64_t ldb, \
                     ELEM(S) *restrict c, int64_t ldc, int mr, int nr, int accumulate) {            \
        const int64_t ars = 1;                                                                     \
        MICRO_BODY(S, 6)                                                                           \
    }                                                                                              \
    /* Tiles of all 6 rows, A read in place from rows ars apart. */                             \
    static void NAME##_rows(int64_t kc, const ELEM(S) *restrict a, int64_t ars,                    \
                            const ELEM(S) *restrict b, int64_t ldb, ELEM(S) *restrict c,            \
                            int64_t ldc, int nr, int accumulate) {                                  \
        const int mr = 6;                                                                          \
        MICRO_BODY(S, 1)                                                                           \
    }

GEN_MICRO(micro_f32, ps)
GEN_MICRO(micro_f64, pd)

/* ---- transposing pack: dst[p * W + i] = src[i * ld + p], i < w <= W, p < kc ----
 * 8 x 8 blocks transposed in registers, partial blocks element by element. */
static inline void transpose8(__m256 *r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

static void tpack_f32(const float *src, int64_t ld, int w, int64_t kc, int W, float *dst) {
    for (int i0 = 0; i0 < W; i0 += 8) {
        const int rows = CD_MAX(0, CD_MIN(8, w - i0)), lanes = CD_MIN(8, W - i0);
        int64_t p0 = 0;
        for (; lanes == 8 && rows == 8 && p0 + 8 <= kc; p0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (i0 + i) * ld + p0);
            transpose8(r);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (p0 + j) * W + i0, r[j]);
        }
        for (; p0 < kc; p0++)
            for (int i = 0; i < lanes; i++) dst[p0 * W + i0 + i] = i < rows ? src[(i0 + i) * ld + p0] : 0.0f;
    }
}

#define GEMM_ENTRY cd_gemm_avx2
#define F32_MR 6
#define F32_NR 16
#define F32_KC 512
#define F64_MR 6
#define F64_NR 8
#define F64_KC 512
#include "templates/gemm_impl.h"
