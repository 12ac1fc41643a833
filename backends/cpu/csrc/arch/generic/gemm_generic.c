/* Portable GEMM microkernels for CPUs without AVX2 (the driver is templates/gemm_impl.h),
 * written so that the compiler vectorizes the column loop. */
#include "runtime/internal.h"
#include "runtime/isa.h"

/* kc steps of A (element (i, p) at a[i * ars + p * acs]) times B (rows ldb
 * apart), stored mr x nr. */
#define GEN_TILE(T, MR, NR)                                                                  \
    static void tile_##T(int64_t kc, const T *restrict a, int64_t ars, int64_t acs,           \
                         const T *restrict b, int64_t ldb, T *restrict c, int64_t ldc, int mr, \
                         int nr, int accumulate) {                                            \
        T acc[MR][NR];                                                                       \
        for (int i = 0; i < MR; i++)                                                         \
            for (int j = 0; j < NR; j++) acc[i][j] = 0;                                      \
        for (int64_t p = 0; p < kc; p++) {                                                   \
            const T *ap = a + p * acs, *bp = b + p * ldb;                                    \
            for (int i = 0; i < MR; i++) {                                                   \
                const T ai = ap[i * ars];                                                    \
                for (int j = 0; j < NR; j++) acc[i][j] += ai * bp[j];                        \
            }                                                                                \
        }                                                                                    \
        for (int i = 0; i < mr; i++)                                                         \
            for (int j = 0; j < nr; j++)                                                     \
                c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];        \
    }
GEN_TILE(float, 4, 16)
GEN_TILE(double, 4, 8)

/* A packed A panel (MR wide), and tiles of all MR rows with A read in place. */
#define GEN_MICRO(T, SFX, MR, NR)                                                                    \
    static void micro_##SFX(int64_t kc, const T *a, const T *b, int64_t ldb, T *c, int64_t ldc, int mr, \
                            int nr, int acc) {                                                         \
        tile_##T(kc, a, 1, MR, b, ldb, c, ldc, mr, nr, acc);                                           \
    }                                                                                                  \
    static void micro_##SFX##_rows(int64_t kc, const T *a, int64_t ars, const T *b, int64_t ldb, T *c,  \
                                   int64_t ldc, int nr, int acc) {                                     \
        tile_##T(kc, a, ars, 1, b, ldb, c, ldc, MR, nr, acc);                                          \
    }
GEN_MICRO(float, f32, 4, 16)
GEN_MICRO(double, f64, 4, 8)

/* dst[p * W + i] = src[i * ld + p], i < w <= W, p < kc; rows past w are zero. */
static void tpack_f32(const float *src, int64_t ld, int w, int64_t kc, int W, float *dst) {
    for (int i = 0; i < W; i++)
        for (int64_t p = 0; p < kc; p++) dst[p * W + i] = i < w ? src[i * ld + p] : 0.0f;
}

#define GEMM_ENTRY cd_gemm_generic
#define F32_MR 4
#define F32_NR 16
#define F32_KC 256
#define F64_MR 4
#define F64_NR 8
#define F64_KC 256
#include "templates/gemm_impl.h"
