/* Portable GEMM microkernels for CPUs without AVX2 (the driver is gemm_impl.h),
 * written so that the compiler vectorizes the column loop. */
#include "internal.h"

#define GEN_MICRO(name, T, MR, NR)                                                           \
    static void name(int64_t kc, const T *restrict a, const T *restrict b, T *restrict c,    \
                     int64_t ldc, int mr, int nr, int accumulate) {                          \
        T acc[MR][NR];                                                                       \
        for (int i = 0; i < MR; i++)                                                         \
            for (int j = 0; j < NR; j++) acc[i][j] = 0;                                      \
        for (int64_t p = 0; p < kc; p++) {                                                   \
            const T *ap = a + p * MR, *bp = b + p * NR;                                      \
            for (int i = 0; i < MR; i++) {                                                   \
                const T ai = ap[i];                                                          \
                for (int j = 0; j < NR; j++) acc[i][j] += ai * bp[j];                        \
            }                                                                                \
        }                                                                                    \
        for (int i = 0; i < mr; i++)                                                         \
            for (int j = 0; j < nr; j++)                                                     \
                c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];        \
    }

GEN_MICRO(micro_f32, float, 4, 16)
GEN_MICRO(micro_f64, double, 4, 8)

/* dst[p * W + i] = src[i * ld + p], i < w <= W, p < kc; rows past w are zero. */
static void tpack_f32(const float *src, int64_t ld, int w, int64_t kc, int W, float *dst) {
    for (int i = 0; i < W; i++)
        for (int64_t p = 0; p < kc; p++) dst[p * W + i] = i < w ? src[i * ld + p] : 0.0f;
}

#define GEMM_OPS cd_gemm_generic
#define GEMM_ISA "scalar"
#define F32_MR 4
#define F32_NR 16
#define F32_KC 256
#define F64_MR 4
#define F64_NR 8
#define F64_KC 256
#include "gemm_impl.h"
