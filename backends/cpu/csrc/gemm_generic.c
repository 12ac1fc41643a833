/* Portable GEMM microkernels, written so that the compiler vectorizes the
 * column loop for whatever instruction set the file is built for. */
#include "gemm.h"
#include "internal.h"

#define GEN_MICRO(name, T, MR, NR)                                                           \
    static void name(int64_t kc, const void *va, const void *vb, void *vc, int64_t ldc, int mr, \
                     int nr, int accumulate) {                                               \
        const T *a = va, *b = vb;                                                            \
        T *c = vc;                                                                           \
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

static const cd_gemm_kernel GENERIC_F32 = {4, 16, 128, 256, 2048, micro_f32};
static const cd_gemm_kernel GENERIC_F64 = {4, 8, 96, 256, 1024, micro_f64};

const cd_gemm_kernel *cd_gemm_f32(void) { return &GENERIC_F32; }
const cd_gemm_kernel *cd_gemm_f64(void) { return &GENERIC_F64; }
