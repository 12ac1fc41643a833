/* The AVX2 tile of the products with packed weights (kernels/panels.c): up
 * to 6 rows x 16 columns of C in 12 ymm accumulators; each step of k loads
 * two vectors of B (masked past nr) and broadcasts one value of A per row.
 * Plus the depthwise plane and the epilogue of templates/panels_impl.h,
 * vectorized for AVX2. */
#include <immintrin.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define PANELS_NAME(name) name##_avx2
#include "templates/panels_impl.h"

#define MR_MAX 6

/* The accumulators are named variables, not an array: gcc spills an array of
 * vectors to the stack on every step. Rows past MR and the second vector
 * past NV compile away (MR and NV are constants at every call). */
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

static inline __attribute__((always_inline)) void tile_body(const int MR, const int NV, int64_t k, const float *a,
                                                            int64_t a_row, int64_t a_step, const float *b,
                                                            const int64_t *b_rows, float *c, int64_t ldc, __m256i m0,
                                                            __m256i m1, const float *row_bias,
                                                            const float *col_bias) {
    __m256 init0 = _mm256_setzero_ps(), init1 = init0;
    if (col_bias) {
        init0 = _mm256_maskload_ps(col_bias, m0);
        if (NV > 1) init1 = _mm256_maskload_ps(col_bias + 8, m1);
    }
#define INIT(i)                                                                     \
    __m256 c##i##0 = row_bias && i < MR ? _mm256_broadcast_ss(row_bias + i) : init0; \
    __m256 c##i##1 = row_bias && i < MR ? _mm256_broadcast_ss(row_bias + i) : init1;
    ROWS(INIT)
#undef INIT
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + b_rows[p];
        const __m256 b0 = _mm256_maskload_ps(bp, m0);
        const __m256 b1 = NV > 1 ? _mm256_maskload_ps(bp + 8, m1) : b0;
        const float *ap = a + p * a_step;
#define STEP(i)                                                   \
    if (i < MR) {                                                 \
        const __m256 av = _mm256_broadcast_ss(ap + i * a_row);    \
        c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);               \
        if (NV > 1) c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);   \
    }
        ROWS(STEP)
#undef STEP
    }
    /* Whole vectors go out unmasked: a masked store is slow, and a load of
     * its bytes (the epilogue's, right after) is not forwarded from it. */
    const int full0 = _mm256_movemask_ps(_mm256_castsi256_ps(m0)) == 0xFF;
    const int full1 = _mm256_movemask_ps(_mm256_castsi256_ps(m1)) == 0xFF;
#define STORE(i)                                                                   \
    if (i < MR) {                                                                  \
        if (full0) _mm256_storeu_ps(c + i * ldc, c##i##0);                         \
        else _mm256_maskstore_ps(c + i * ldc, m0, c##i##0);                        \
        if (NV > 1 && full1) _mm256_storeu_ps(c + i * ldc + 8, c##i##1);           \
        else if (NV > 1) _mm256_maskstore_ps(c + i * ldc + 8, m1, c##i##1);        \
    }
    ROWS(STORE)
#undef STORE
}

#define TILE(MR, NV)                                                                                           \
    static void tile_##MR##_##NV(int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b,     \
                                 const int64_t *b_rows, float *c, int64_t ldc, __m256i m0, __m256i m1,               \
                                 const float *row_bias, const float *col_bias) {                               \
        tile_body(MR, NV, k, a, a_row, a_step, b, b_rows, c, ldc, m0, m1, row_bias, col_bias);                 \
    }
#define TILES(MR) TILE(MR, 1) TILE(MR, 2)
TILES(1) TILES(2) TILES(3) TILES(4) TILES(5) TILES(6)

typedef void tile_fixed(int64_t, const float *, int64_t, int64_t, const float *, const int64_t *, float *, int64_t,
                        __m256i, __m256i, const float *, const float *);
static tile_fixed *const TILES_BY_SHAPE[MR_MAX][2] = {
    {tile_1_1, tile_1_2}, {tile_2_1, tile_2_2}, {tile_3_1, tile_3_2},
    {tile_4_1, tile_4_2}, {tile_5_1, tile_5_2}, {tile_6_1, tile_6_2},
};

/* The load mask of the first n of 8 lanes. */
static __m256i lanes(int64_t n) {
    n = CD_MAX(0, CD_MIN(n, 8));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* At most 16 columns: one block of 16 (b_blk is not needed). */
static void tile_avx2(int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b,
                      const int64_t *b_rows, int64_t b_blk, float *c, int64_t ldc, int64_t mr, int64_t nr,
                      const float *row_bias, const float *col_bias) {
    (void)b_blk;
    const int nv = nr > 8 ? 2 : 1;
    TILES_BY_SHAPE[mr - 1][nv - 1](k, a, a_row, a_step, b, b_rows, c, ldc, lanes(nr), lanes(nr - 8), row_bias,
                                   col_bias);
}

void cd_panels_avx2(cd_isa_ops *ops) {
    ops->tile_f32 = tile_avx2;
    ops->tile_mr = MR_MAX;
    ops->tile_nr = 16;
    fill_panels_avx2(ops);
}
