/* The AVX-512 tile of the products with packed weights (kernels/panels.c):
 * up to 8 rows x 32 columns of C in 16 zmm accumulators; each step of k
 * loads two vectors of B (masked past nr, so B is never read past its
 * columns) and broadcasts one value of A per row. Plus the depthwise plane
 * and the epilogue of templates/panels_impl.h, vectorized for AVX-512. */
#include <immintrin.h>

#include "arch/x86/isa_x86.h"
#include "runtime/internal.h"

#define PANELS_NAME(name) name##_avx512
#define DW_RUNS 8 /* eight sums of the depthwise plane in zmm registers */
#include "templates/panels_impl.h"

#define MR_MAX 8

/* The accumulators are named variables, not an array: gcc spills an array of
 * vectors to the stack on every step. Rows past MR and the second vector
 * past NV compile away (MR and NV are constants at every call). */
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static inline __attribute__((always_inline)) void tile_body(const int MR, const int NV, int64_t k, const float *a,
                                                            int64_t a_row, int64_t a_step, const float *b,
                                                            const int64_t *b_rows, int64_t b_blk, float *c, int64_t ldc,
                                                            __mmask16 m0, __mmask16 m1, const float *row_bias,
                                                            const float *col_bias) {
    __m512 init0 = _mm512_setzero_ps(), init1 = init0;
    if (col_bias) {
        init0 = _mm512_maskz_loadu_ps(m0, col_bias);
        if (NV > 1) init1 = _mm512_maskz_loadu_ps(m1, col_bias + 16);
    }
#define INIT(i)                                                                  \
    __m512 c##i##0 = row_bias && i < MR ? _mm512_set1_ps(row_bias[i]) : init0;  \
    __m512 c##i##1 = row_bias && i < MR ? _mm512_set1_ps(row_bias[i]) : init1;
    ROWS(INIT)
#undef INIT
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + b_rows[p];
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp);
        const __m512 b1 = NV > 1 ? _mm512_maskz_loadu_ps(m1, bp + b_blk) : b0;
        const float *ap = a + p * a_step;
#define STEP(i)                                                   \
    if (i < MR) {                                                 \
        const __m512 av = _mm512_set1_ps(ap[i * a_row]);          \
        c##i##0 = _mm512_fmadd_ps(av, b0, c##i##0);               \
        if (NV > 1) c##i##1 = _mm512_fmadd_ps(av, b1, c##i##1);   \
    }
        ROWS(STEP)
#undef STEP
    }
    /* Whole vectors go out unmasked: a load of a masked store's bytes (the
     * epilogue's, right after) waits for the store to retire instead of being
     * forwarded. */
#define STORE(i)                                                                              \
    if (i < MR) {                                                                             \
        if (m0 == 0xFFFF) _mm512_storeu_ps(c + i * ldc, c##i##0);                             \
        else _mm512_mask_storeu_ps(c + i * ldc, m0, c##i##0);                                 \
        if (NV > 1 && m1 == 0xFFFF) _mm512_storeu_ps(c + i * ldc + 16, c##i##1);              \
        else if (NV > 1) _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c##i##1);                \
    }
    ROWS(STORE)
#undef STORE
}

#define TILE(MR, NV)                                                                                           \
    static void tile_##MR##_##NV(int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b,     \
                                 const int64_t *b_rows, int64_t b_blk, float *c, int64_t ldc, __mmask16 m0,    \
                                 __mmask16 m1, const float *row_bias, const float *col_bias) {                \
        tile_body(MR, NV, k, a, a_row, a_step, b, b_rows, b_blk, c, ldc, m0, m1, row_bias, col_bias);         \
    }
#define TILES(MR) TILE(MR, 1) TILE(MR, 2)
TILES(1) TILES(2) TILES(3) TILES(4) TILES(5) TILES(6) TILES(7) TILES(8)

typedef void tile_fixed(int64_t, const float *, int64_t, int64_t, const float *, const int64_t *, int64_t, float *,
                        int64_t, __mmask16, __mmask16, const float *, const float *);
static tile_fixed *const TILES_BY_SHAPE[MR_MAX][2] = {
    {tile_1_1, tile_1_2}, {tile_2_1, tile_2_2}, {tile_3_1, tile_3_2}, {tile_4_1, tile_4_2},
    {tile_5_1, tile_5_2}, {tile_6_1, tile_6_2}, {tile_7_1, tile_7_2}, {tile_8_1, tile_8_2},
};

static __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

static void tile_avx512(int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b,
                        const int64_t *b_rows, int64_t b_blk, float *c, int64_t ldc, int64_t mr, int64_t nr,
                        const float *row_bias, const float *col_bias) {
    const int nv = nr > 16 ? 2 : 1;
    TILES_BY_SHAPE[mr - 1][nv - 1](k, a, a_row, a_step, b, b_rows, b_blk, c, ldc, lanes(nr), lanes(nr - 16),
                                   row_bias, col_bias);
}

void cd_panels_avx512(cd_isa_ops *ops) {
    ops->tile_f32 = tile_avx512;
    ops->tile_mr = MR_MAX;
    ops->tile_nr = 32;
    fill_panels_avx512(ops);
}
