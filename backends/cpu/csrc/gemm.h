/* GEMM microkernels. A kernel computes an mr x nr tile (mr <= MR, nr <= NR) of
 * C += / = A_panel @ B_panel over kc, from panels packed by matmul.c: A k-major
 * with MR values per k, B k-major with NR values per k. C is row-major with
 * leading dimension ldc, in the packed element type (float or double). */
#ifndef CANDLE_CPU_GEMM_H
#define CANDLE_CPU_GEMM_H

#include <stdint.h>

typedef void (*cd_micro_fn)(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int mr,
                            int nr, int accumulate);

typedef struct {
    int mr, nr;              /* register tile */
    int64_t mc, kc, nc;      /* cache blocking of A rows, K, and B columns */
    cd_micro_fn micro;
} cd_gemm_kernel;

/* C (m x n, row-major, leading dim ldc) = A @ B with A and B of dtype CD_f32 or
 * CD_f64 at any strides; used by matmul and the convolutions. */
int cd_gemm(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
            const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc);

/* The best kernel for this CPU. */
const cd_gemm_kernel *cd_gemm_f32(void);
const cd_gemm_kernel *cd_gemm_f64(void);

#endif
