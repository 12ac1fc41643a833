/* GEMM for the float dtypes. One driver (gemm_impl.h) is compiled once per
 * instruction set around that set's register-tiled microkernels; the best set
 * the CPU supports is chosen at run time (see isa.c). */
#ifndef CANDLE_CPU_GEMM_H
#define CANDLE_CPU_GEMM_H

#include <stdint.h>

typedef struct {
    const char *isa;
    /* C (m x n, row-major, leading dim ldc) = A @ B for A, B of dtype f32, bf16
     * or f16 (C is f32) or f64 (C is f64), at any strides. */
    int (*gemm)(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
                const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc);
} cd_gemm_ops;

extern const cd_gemm_ops cd_gemm_generic, cd_gemm_avx2, cd_gemm_avx512;

/* The set for this CPU (or CANDLE_CPU_ISA). */
const cd_gemm_ops *cd_gemm_best(void);

/* cd_gemm_best()->gemm, for the convolutions. */
int cd_gemm(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
            const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc);

#endif
