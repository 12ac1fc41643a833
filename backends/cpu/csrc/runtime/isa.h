/* The one way instruction-set specific code is chosen: the table cd_ops,
 * filled once when the library loads (isa.c). The portable entries come
 * first (arch/generic); then the set in use, the best this CPU supports or
 * the one CANDLE_CPU_ISA names, writes its own over them (arch/<machine>).
 * Kernels call through cd_ops and never ask which set is in use. */
#ifndef CANDLE_CPU_ISA_H
#define CANDLE_CPU_ISA_H

#include <stdint.h>

#include "kernels/panels.h"
#include "kernels/quant.h"
#include "runtime/candle_cpu.h"

/* C (m x n, row-major, leading dim ldc) = A @ B for A, B of dtype f32, bf16 or
 * f16 (C is f32) or f64 (C is f64), at any strides. */
typedef int cd_gemm_fn(int32_t dtype, int64_t m, int64_t n, int64_t k, const void *a, int64_t ars, int64_t acs,
                       const void *b, int64_t brs, int64_t bcs, void *c, int64_t ldc);
typedef void (*cd_half_to_f32)(int64_t n, const uint16_t *src, float *dst);

/* Products against a right-hand matrix packed once and used many times (an
 * RNN's recurrent weights, at every time step): B packed whole into panels of
 * `width` columns, then C = A @ one panel at a time on the calling thread, with
 * the GEMM's own microkernel (templates/gemm_impl.h). ct is the compute dtype:
 * f32 (for f32, bf16 and f16 sources) or f64. */
typedef struct {
    int (*width)(int32_t ct);  /* columns per B panel */
    int (*height)(int32_t ct); /* rows per packed A panel */
    /* B (k x n of dtype, any strides) to ceil(n / width) panels of k x width ct values, zeros past n */
    void (*pack_b)(int32_t dtype, int64_t k, int64_t n, const void *b, int64_t brs, int64_t bcs, void *dst);
    /* A (m x k of ct, rows lda apart) to ceil(m / height) panels of height x k ct values */
    void (*pack_a)(int32_t ct, int64_t m, int64_t k, const void *a, int64_t lda, void *dst);
    /* C_q (m x nr, rows ldc apart, at c + q * cstride ct values) = packed A @ panel q, for count
     * consecutive panels from `panels`, nr <= width; with accumulate, C_q += the product */
    void (*product)(int32_t ct, int64_t m, int64_t k, const void *apack, const void *panels, int count, int nr,
                    void *c, int64_t ldc, int64_t cstride, int accumulate);
} cd_panel_ops;

/* One time step of rows x n LSTM cells in f32 (kernels/rnn.c), in one pass: pre[k] + r * ldp holds
 * row r's pre-activations of gate k (i, f, g, o), to which bias[k] is added; clip > 0 clips them
 * to [-clip, clip]; peep (i, f, o; NULL: none) adds p_i * c and p_f * c to i and f, p_o * c_new to
 * o; input_forget makes f = 1 - i. c (rows ld apart) is updated in place; h and y (rows ld apart)
 * receive o * tanh(c). */
typedef struct {
    int64_t rows, n, ldp, ld;
    const float *pre[4], *bias[4], *peep[3];
    float *c, *h, *y;
    float clip;
    int input_forget;
} cd_lstm_step;
typedef void (*cd_f32_to_half)(int64_t n, const float *src, uint16_t *dst);

typedef struct {
    const char *name;   /* what cd_isa() reports */
    int bf16_dot;       /* bf16 x bf16 products run on AVX512-BF16 dot products */
    cd_gemm_fn *gemm;
    const cd_panel_ops *panels;
    /* Contiguous f32 loops of unary ops; NULL: elementwise.c's portable loop. */
    cd_unary_fn unary_f32[CD_UNARY_COUNT];
    /* Block conversions between f32 and the half dtypes. */
    cd_half_to_f32 f16_to_f32, bf16_to_f32;
    cd_f32_to_half f32_to_f16, f32_to_bf16;
    /* softmax (or log_softmax) and layer_norm (or rms_norm, b NULL) of one f32 row; y may be x. */
    void (*softmax_row)(const float *x, float *y, int64_t n, int take_log);
    void (*norm_row)(const float *x, float *y, int64_t n, const float *w, const float *b, float eps, int rms);
    /* Contiguous f32 runs: the sum in double, and the max (or min), NaN when any is NaN. */
    double (*sum_f32)(const float *x, int64_t n);
    float (*extreme_f32)(const float *x, int64_t n, int is_max);
    /* y[i * ldy + j] = x[i] . w[j] for the m rows of x and the nw <= 4 rows of w, each k contiguous floats
     * (a tile of decoded weight rows against a few activation rows: each load of x feeds nw products). */
    void (*dot_rows_f32)(const float *w, int nw, const float *x, int64_t m, int64_t k, float *y, int64_t ldy);
    /* NULL: the recurrent layers' portable cell loops (templates/rnn_cell.h). */
    void (*lstm_step_f32)(const cd_lstm_step *step);
    /* acc[i * n + e] += sum_j p[i * ldp + j] * v[j * ldv + e] for the m <= 4 rows of p and the n contiguous
     * floats of the k rows of v (a decoding step's attention weights times its value rows). */
    void (*axpy_rows_f32)(const float *p, int64_t ldp, int64_t m, int64_t k, const float *v, int64_t ldv,
                          int64_t n, float *acc);
    /* A row of k activations quantized to blocks of act_type (q8_0, q8_1 or q8_K) at `blocks`, bit for bit
     * as the type's reference quantizer; the 32-value types also get the tables before the blocks
     * (kernels/quant.h). */
    void (*quantize_act)(int32_t act_type, const float *x, int64_t k, char *blocks);
    /* By ggml type id: a weight row's dot product with activations quantized in its act_type. */
    cd_qdot_fn *qdot[CD_QTYPE_COUNT];
    /* Products with packed weights (kernels/panels.c): the register tile (at most
     * tile_mr x tile_nr), a depthwise plane and the epilogue. */
    cd_tile_fn *tile_f32;
    int64_t tile_mr, tile_nr;
    cd_dw_fn *dw_plane_f32;
    cd_dw_scratch_fn *dw_scratch_f32;
    cd_dw_block_fn *dw_block_f32;
    cd_dw_scratch_fn *dw_block_scratch_f32;
    cd_epilogue_fn *epilogue_f32;
    /* The tile of the int8 products (kernels/int8.c), at most int8_mr rows. */
    cd_int8_tile_fn *tile_int8;
    int64_t int8_mr;
    /* By ggml type id: rows decoded to f32 for the GEMM path (NULL: the type's own dequantizer); the
     * same values up to the rounding of a fused multiply-add. */
    cd_dequant_row_fn *qdecode[CD_QTYPE_COUNT];
    /* By ggml type id: a packed group's products with rows of activations (NULL: unpack, then qdot). */
    cd_qgroup_fn *qgroup[CD_QTYPE_COUNT];
    /* By ggml type id: the same for one row of activations (decode; NULL: qgroup with m = 1), an entry of
     * its own so that an instruction set can take another's where that one streams faster. */
    cd_qrow_fn *qrow[CD_QTYPE_COUNT];
} cd_isa_ops;

extern cd_isa_ops cd_ops;

/* An instruction set beyond the portable code: whether this CPU runs it, and
 * what it writes over the portable entries. */
typedef struct {
    const char *name;
    int (*supported)(void);
    void (*fill)(cd_isa_ops *ops);
} cd_isa_set;

/* arch/generic: every entry, in portable C. */
void cd_isa_fill_generic(cd_isa_ops *ops);
cd_gemm_fn cd_gemm_generic;
extern const cd_panel_ops cd_gemm_generic_panels;
void cd_qdot_generic(cd_isa_ops *ops);
void cd_panels_generic(cd_isa_ops *ops);

/* arch/<machine>: this architecture's sets, best first, ended by a NULL name. */
extern const cd_isa_set cd_arch_sets[];

#endif
