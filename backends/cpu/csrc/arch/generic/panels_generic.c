/* The portable tiles of the products with packed weights (kernels/panels.c,
 * kernels/int8.c), with the portable depthwise plane and epilogue
 * (templates/panels_impl.h). */
#include "runtime/internal.h"
#include "runtime/isa.h"

#define PANELS_NAME(name) name##_generic
#include "templates/panels_impl.h"

static void tile_generic(int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b,
                         const int64_t *b_rows, int64_t b_blk, float *c, int64_t ldc, int64_t mr, int64_t nr,
                         const float *row_bias, const float *col_bias) {
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < nr; j++) {
            float acc = row_bias ? row_bias[i] : col_bias ? col_bias[j] : 0.0f;
            const float *bj = b + (j / CD_PANEL) * b_blk + j % CD_PANEL;
            for (int64_t p = 0; p < k; p++) acc += a[i * a_row + p * a_step] * bj[b_rows[p]];
            c[i * ldc + j] = acc;
        }
}

static void tile_int8_generic(int64_t groups, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c,
                              int64_t ldc, int64_t mr) {
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < CD_PANEL; j++) {
            int32_t s = 0;
            for (int64_t g = 0; g < groups; g++)
                for (int64_t q = 0; q < 4; q++) s += a[i * lda + 4 * g + q] * b[(g * CD_PANEL + j) * 4 + q];
            c[i * ldc + j] = s;
        }
}

void cd_panels_generic(cd_isa_ops *ops) {
    ops->tile_int8 = tile_int8_generic;
    ops->int8_mr = 4;
    ops->tile_f32 = tile_generic;
    ops->tile_mr = 4;
    ops->tile_nr = CD_PANEL;
    fill_panels_generic(ops);
}
