/* What the instruction sets provide to the products with packed weights
 * (kernels/panels.c): the register tile, the plane of a depthwise
 * convolution and the epilogue (residual and activation). Each set has its
 * version in the ISA table (runtime/isa.h); templates/panels_impl.h holds the
 * portable C the sets compile with their own flags. */
#ifndef CANDLE_CPU_PANELS_H
#define CANDLE_CPU_PANELS_H

#include <stdint.h>

/* Rows per panel of cd_pack_panels. */
#define CD_PANEL 16

typedef struct {
    int32_t code; /* CD_ACT_* */
    float alpha, beta;
    float scale, shift; /* applied after the activation: y * scale + shift */
} cd_act;

/* C[i * ldc + j] = bias + sum_p A(i, p) * B(p, j) for i < mr, j < nr (at most the
 * set's tile), where A(i, p) = a[i * a_row + p * a_step] and B(p, j) =
 * b[b_rows[p] + (j / 16) * b_blk + j % 16]: one operand is a panel of
 * cd_pack_panels, the other is read in place (B's columns past nr are never read);
 * B's rows are found through a table, so that they may be the rows of an image
 * a convolution's taps read (no im2col). bias: row_bias[i] when row_bias,
 * col_bias[j] when col_bias, else 0. */
typedef void cd_tile_fn(int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b,
                        const int64_t *b_rows, int64_t b_blk, float *c, int64_t ldc, int64_t mr, int64_t nr,
                        const float *row_bias, const float *col_bias);

/* The geometry of one plane of a depthwise convolution. */
typedef struct {
    int64_t h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    int64_t xs_h, xs_w; /* the input plane's strides */
} cd_dw_geom;

/* out (oh x ow, contiguous) = bias + the depthwise convolution of one plane x
 * with taps[t * tap_step] (t = i * kw + j); scratch holds dw_scratch(g) floats. */
typedef void cd_dw_fn(const cd_dw_geom *g, const float *x, const float *taps, int64_t tap_step, float bias,
                      float *out, float *scratch);
typedef int64_t cd_dw_scratch_fn(const cd_dw_geom *g);
/* The same for up to 16 small planes at once, vectors along the planes: plane l
 * is x + l * xs_c, its taps taps + l * ch_step (tap t at t * tap_step), its bias
 * bias[l] (bias may be NULL), its output out + l * oh * ow. */
typedef void cd_dw_block_fn(const cd_dw_geom *g, const float *x, int64_t xs_c, int64_t planes, const float *taps,
                            int64_t ch_step, int64_t tap_step, const float *bias, float *out, float *scratch);

/* C[i * ldc + j] (int32) = sum over the k = 4 * groups of A[i][p] * B[p][j] for
 * i < mr (at most the set's int8_mr) and j < 16: A u8 rows (row stride lda,
 * whole groups of 4), B one panel of cd_pack_int8_panels (s8, 64 bytes a
 * group). Exact: no saturation. */
typedef void cd_int8_tile_fn(int64_t groups, const uint8_t *a, int64_t lda, const int8_t *b, int32_t *c,
                             int64_t ldc, int64_t mr);

/* y = act(y + res) * scale + shift over rows of n contiguous floats, ld apart
 * in y and in res (res NULL: no residual): a whole tile in one call. */
typedef void cd_epilogue_fn(float *y, int64_t rows, int64_t n, int64_t ld, const float *res, const cd_act *act);

#endif
