/* Public C ABI of libcandle_cpu, the kernels of the candle-api cpu backend.
 *
 * Conventions (see docs/backend-contract.md):
 *  - every entry point returns an int status (0 = ok); on failure the reason is
 *    in the thread-local string returned by cd_last_error();
 *  - sizes, shapes and strides are int64 and counted in elements, never bytes;
 *  - pointers passed in already include the view's start offset;
 *  - a "layout descriptor" (lay) is an int64 array:
 *      [ndim, shape[0..ndim), strides of operand 0[0..ndim), strides of operand 1 ...]
 *    with one stride row per strided operand (the output is always contiguous
 *    unless an entry point says otherwise);
 *  - dtype codes and op codes are defined by the X-macro lists below; Python
 *    reads the names from cd_*_names() so the two sides can never drift.
 */
#ifndef CANDLE_CPU_H
#define CANDLE_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CD_API __attribute__((visibility("default")))

/* Bumped whenever a signature below changes; the Python side refuses a library
 * whose version differs from the one it was written for. */
#define CD_ABI_VERSION 8

/* Most dimensions an op accepts (the Python core enforces the same limit). */
#define CD_MAX_DIMS 32

/* X(name, code, storage type) */
#define CD_DTYPES(X)          \
    X(u8, 0, uint8_t)         \
    X(u32, 1, uint32_t)       \
    X(i16, 2, int16_t)        \
    X(i32, 3, int32_t)        \
    X(i64, 4, int64_t)        \
    X(bf16, 5, uint16_t)      \
    X(f16, 6, uint16_t)       \
    X(f32, 7, float)          \
    X(f64, 8, double)

enum {
#define CD_X(name, code, type) CD_##name = code,
    CD_DTYPES(CD_X)
#undef CD_X
    CD_NUM_DTYPES
};

/* Unary ops. X(name, valid for integer dtypes) */
#define CD_UNARY_OPS(X) \
    X(abs, 1) X(neg, 1) X(sqr, 1) X(sign, 1) X(relu, 1) \
    X(ceil, 1) X(floor, 1) X(round, 1) X(trunc, 1) \
    X(recip, 0) X(sqrt, 0) X(rsqrt, 0) X(exp, 0) X(expm1, 0) X(log, 0) X(log1p, 0) \
    X(sin, 0) X(cos, 0) X(tan, 0) X(asin, 0) X(acos, 0) X(atan, 0) \
    X(sinh, 0) X(cosh, 0) X(tanh, 0) X(asinh, 0) X(acosh, 0) X(atanh, 0) \
    X(erf, 0) X(gelu, 0) X(gelu_erf, 0) X(silu, 0) X(sigmoid, 0) X(softplus, 0)

/* Unary ops with up to two double parameters p0, p1. */
#define CD_PARAM_OPS(X) \
    X(affine, 1)      /* x * p0 + p1 */ \
    X(powf, 0)        /* x ** p0 */ \
    X(elu, 0)         /* x > 0 ? x : p0 * (exp(x) - 1) */ \
    X(leaky_relu, 0)  /* x > 0 ? x : p0 * x */ \
    X(clamp, 1)       /* min(max(x, p0), p1), NaN propagates */

/* Binary ops, same dtype in and out. */
#define CD_BINARY_OPS(X) \
    X(add, 1) X(sub, 1) X(mul, 1) X(div, 1) X(maximum, 1) X(minimum, 1) \
    X(pow, 1) X(rem, 1) X(fmod, 1)

/* Comparisons; the output is u8 (0 or 1). */
#define CD_CMP_OPS(X) X(eq, 1) X(ne, 1) X(lt, 1) X(le, 1) X(gt, 1) X(ge, 1)

/* Activations a product applies to its result (kernels/panels.c): X(name, ints);
 * parameters alpha, beta as in ONNX (leaky_relu: alpha; clip: [alpha, beta];
 * hard_sigmoid: max(0, min(1, alpha * x + beta))). */
#define CD_ACT_OPS(X) \
    X(none, 1) X(relu, 1) X(leaky_relu, 1) X(clip, 1) X(sigmoid, 1) X(hard_sigmoid, 1) \
    X(hard_swish, 1) X(tanh, 1) X(gelu_erf, 1) X(silu, 1)

/* Reductions; argmax/argmin write u32 indices. */
#define CD_REDUCE_OPS(X) X(sum, 1) X(prod, 1) X(max, 1) X(min, 1) X(argmax, 1) X(argmin, 1)

#define CD_ENUM_OPS(prefix, LIST) enum { LIST(prefix##_ENUM_X) prefix##_COUNT };
#define CD_UNARY_ENUM_X(name, ints) CD_UNARY_##name,
#define CD_PARAM_ENUM_X(name, ints) CD_PARAM_##name,
#define CD_BINARY_ENUM_X(name, ints) CD_BINARY_##name,
#define CD_CMP_ENUM_X(name, ints) CD_CMP_##name,
#define CD_REDUCE_ENUM_X(name, ints) CD_REDUCE_##name,
#define CD_ACT_ENUM_X(name, ints) CD_ACT_##name,
CD_ENUM_OPS(CD_UNARY, CD_UNARY_OPS)
CD_ENUM_OPS(CD_PARAM, CD_PARAM_OPS)
CD_ENUM_OPS(CD_BINARY, CD_BINARY_OPS)
CD_ENUM_OPS(CD_CMP, CD_CMP_OPS)
CD_ENUM_OPS(CD_REDUCE, CD_REDUCE_OPS)
CD_ENUM_OPS(CD_ACT, CD_ACT_OPS)

/* ---- runtime ---------------------------------------------------------- */
CD_API int cd_abi_version(void);
CD_API const char *cd_last_error(void);
/* Comma-separated names, in code order: "dtypes", "unary", "param", "binary",
 * "cmp", "reduce", "act". NULL for an unknown table. */
CD_API const char *cd_names(const char *table);
/* The instruction set the kernels were dispatched to: "avx512", "avx2" or "scalar". */
CD_API const char *cd_isa(void);
/* 1 when the AVX-512 set is in use and the CPU has AVX512-BF16: bf16 x bf16
 * products then run on its dot-product instruction. */
CD_API int cd_has_avx512bf16(void);
/* Bytes of the level-1, 2 or 3 data cache, as the GEMM blocking sees it. */
CD_API int64_t cd_cache_bytes(int32_t level);
/* 64-byte aligned; large blocks are cached for reuse. NULL + error when out of memory. */
CD_API void *cd_alloc(int64_t nbytes);
CD_API void cd_free(void *ptr);
CD_API int cd_get_num_threads(void);
CD_API int cd_set_num_threads(int n);

/* ---- elementwise ------------------------------------------------------ */
/* Contiguous kernels are looked up once as function pointers; NULL when the
 * (op, dtype) pair is not supported. */
typedef int (*cd_unary_fn)(int64_t n, const void *x, void *y);
typedef int (*cd_param_fn)(int64_t n, const void *x, void *y, double p0, double p1);
typedef int (*cd_binary_fn)(int64_t n, const void *a, const void *b, void *out);
CD_API cd_unary_fn cd_unary_kernel(int32_t op, int32_t dtype);
CD_API cd_param_fn cd_param_kernel(int32_t op, int32_t dtype);
CD_API cd_binary_fn cd_binary_kernel(int32_t op, int32_t dtype);
CD_API cd_binary_fn cd_cmp_kernel(int32_t op, int32_t dtype);
CD_API cd_unary_fn cd_cast_kernel(int32_t src_dtype, int32_t dst_dtype);

/* Strided forms: lay has one stride row (unary, param, cast) or two (binary, cmp). */
CD_API int cd_unary_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *x, void *y);
CD_API int cd_param_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *x, void *y,
                            double p0, double p1);
CD_API int cd_binary_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *a,
                             const void *b, void *out);
CD_API int cd_cmp_strided(int32_t op, int32_t dtype, const int64_t *lay, const void *a,
                          const void *b, void *out);
CD_API int cd_cast_strided(int32_t src_dtype, int32_t dst_dtype, const int64_t *lay, const void *x,
                           void *y);
/* out = cond != 0 ? t : f; lay has three stride rows (cond, t, f); cond is u8. */
CD_API int cd_where(int32_t dtype, const int64_t *lay, const uint8_t *cond, const void *t,
                    const void *f, void *out);
/* Strided to strided copy; lay has two stride rows (src, dst). */
CD_API int cd_copy(int32_t itemsize, const int64_t *lay, const void *src, void *dst);
/* Fills a strided view (one stride row) with the itemsize bytes at value. */
CD_API int cd_fill(int32_t itemsize, const int64_t *lay, void *dst, const void *value);

/* ---- reductions ------------------------------------------------------- */
/* lay = [nkeep, keep shape, keep strides, nred, red shape, red strides];
 * out is contiguous over the kept dims. */
CD_API int cd_reduce(int32_t op, int32_t dtype, const int64_t *lay, const void *x, void *out);
/* Inclusive cumulative sum along one dim; lay = [ndim, shape, strides, dim]. */
CD_API int cd_cumsum(int32_t dtype, const int64_t *lay, const void *x, void *out);

/* ---- matmul ----------------------------------------------------------- */
/* desc = [dtype, m, n, k, a_rs, a_cs, b_rs, b_cs, nbatch, batch shape, a batch
 *         strides, b batch strides]; out is contiguous (batch..., m, n). The
 * dtype rides in the descriptor: one ctypes argument fewer is a tenth of a small
 * product's cost. */
CD_API int cd_matmul(const int64_t *desc, const void *a, const void *b, void *out);

/* ---- indexing --------------------------------------------------------- */
/* All index ops take the index dtype (u8, u32, i16, i32 or i64) separately and
 * fail, naming the offending index, when one is out of range. */
/* out[pre, j, post] = x[pre, ids[j], post]; lay = [ndim, shape, x strides, dim],
 * ids contiguous with n_ids entries; out contiguous with shape[dim] = n_ids. */
CD_API int cd_index_select(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *x,
                           const void *ids, int64_t n_ids, void *out);
/* out[i] = x[i with i[dim] = ids[i]]; lay = [ndim, ids shape, x strides, ids strides,
 * dim, x size along dim]; out contiguous with the ids shape. */
CD_API int cd_gather(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *x,
                     const void *ids, void *out);
/* In place on dst (contiguous, size dst_dim along dim): for every i of src/ids,
 * dst[i with i[dim] = ids[i]] (+)= src[i]. lay = [ndim, src shape, src strides,
 * ids strides, dim, dst_dim]. accumulate = 0 assigns, 1 adds. */
CD_API int cd_scatter(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *ids,
                      const void *src, void *dst, int32_t accumulate);
/* In place on dst (contiguous): dst[pre, ids[j], post] += src[pre, j, post].
 * lay = [ndim, src shape, src strides, dim, dst_dim]; ids contiguous. */
CD_API int cd_index_add(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *ids,
                        const void *src, void *dst);

/* ---- convolution, pooling, resampling ---------------------------------- */
/* p = [batch, c_in, spatial in (2), c_out, kernel (2), stride (2), padding (2),
 *      dilation (2), groups, spatial out (2), output padding (2)];
 * 1-d convolutions use a height of 1. x and w are strided 4-d views
 * (lay = [x strides (4), w strides (4)]); out is contiguous (b, c_out, h, w). */
CD_API int cd_conv2d(int32_t dtype, const int64_t *p, const int64_t *lay, const void *x,
                     const void *w, void *out);
/* As cd_conv2d with w of shape (c_in, c_out / groups, kh, kw). */
CD_API int cd_conv_transpose2d(int32_t dtype, const int64_t *p, const int64_t *lay, const void *x,
                               const void *w, void *out);
/* The gradient of cd_conv2d(x, w) = gout with respect to w: dw (c_out, c_in / groups,
 * kh, kw) contiguous; p as for cd_conv2d; lay = x's 4 strides then gout's 4 strides. */
CD_API int cd_conv2d_backward_weight(int32_t dtype, const int64_t *p, const int64_t *lay, const void *x,
                                     const void *gout, void *dw);
/* p = [batch, channels, h, w, kh, kw, sh, sw, pad_h, pad_w, dil_h, dil_w, out_h, out_w,
 *      count_include_pad]; x strided (lay = 4 strides); out contiguous. mode 0 = max, 1 = avg. */
CD_API int cd_pool2d(int32_t dtype, int32_t mode, const int64_t *p, const int64_t *lay,
                     const void *x, void *out);
/* The gradient of cd_pool2d for x: gx (b, c, h, w) contiguous from g (b, c, oh, ow)
 * contiguous; q and lay (x's strides) as for cd_pool2d; float dtypes. */
CD_API int cd_pool2d_backward(int32_t dtype, int32_t mode, const int64_t *q, const int64_t *lay, const void *x,
                              const void *g, void *gx);
/* p = [batch, channels, h, w, out_h, out_w]; mode 0 = nearest, 1 = bilinear,
 * 2 = bilinear with align_corners. */
CD_API int cd_upsample2d(int32_t dtype, int32_t mode, const int64_t *p, const int64_t *lay,
                         const void *x, void *out);

/* ---- fused ------------------------------------------------------------ */
/* Row kernels work on the last dim: lay = [ndim, shape, x strides]; out contiguous. */
CD_API int cd_softmax_last(int32_t dtype, const int64_t *lay, const void *x, void *out, int32_t log);
/* w and b are contiguous vectors of the last dim (b may be NULL). rms = 1 gives
 * rms_norm (no mean removal, b ignored). res (may be NULL): contiguous rows of
 * x's shape added to x before the norm (skip_layer_norm). */
CD_API int cd_norm_last(int32_t dtype, const int64_t *lay, const void *x, const void *res, const void *w,
                        const void *b, void *out, double eps, int32_t rms);
/* x is (b, h, t, d) strided (lay = 4 strides); cos and sin contiguous (t, d/2) or
 * (b, t, d/2) when per_batch; interleaved pairs (x[2i], x[2i+1]) or halves. */
CD_API int cd_rope(int32_t dtype, const int64_t *shape, const int64_t *lay, const void *x,
                   const void *cos, const void *sin, void *out, int32_t interleaved,
                   int32_t per_batch);
/* out (rows x f) = silu(x[:, :f]) * x[:, f:] for x (rows x 2f), both contiguous: SwiGLU's gate and up
 * halves of one product; float dtypes (f16 and bf16 computed in f32). */
CD_API int cd_silu_mul(int32_t dtype, int64_t rows, int64_t f, const void *x, void *out);
/* out (rows x n) = gelu(x + b) with b (n) added to every row, x and b contiguous; tanh = 1:
 * the tanh approximation (FastGelu), else the erf form (BiasGelu). */
CD_API int cd_bias_gelu(int32_t dtype, int64_t rows, int64_t n, const void *x, const void *b, void *out,
                        int32_t tanh);
/* Fused optimizer steps, in place over n contiguous elements of dtype (f32,
 * f64). AdamW: hp = [lr, beta1, beta2, eps, weight_decay, 1 - beta1^t,
 * 1 - beta2^t]. SGD: hp = [lr, weight_decay, momentum, dampening]; m is the
 * momentum buffer or NULL, first says it is uninitialized. */
CD_API int cd_adamw(int32_t dtype, int64_t n, void *p, const void *g, void *m, void *v, const double *hp);
CD_API int cd_sgd(int32_t dtype, int64_t n, void *p, const void *g, void *m, const double *hp, int32_t first,
                  int32_t nesterov);
/* Scaled-dot-product attention, out (batch..., L, Ev) contiguous =
 * softmax(q @ k^T * scale + mask) @ v. desc = [nb, L, S, E, Ev, causal,
 * batch shape (nb), then for q, k, v and mask in turn nb batch strides and the
 * two matrix strides]. mask is NULL, u8 (0 hides a key) or additive of dtype. */
CD_API int cd_sdpa(int32_t dtype, const int64_t *desc, const void *q, const void *k, const void *v,
                   const void *mask, int32_t mask_dtype, void *out, double scale);
/* One recurrent layer (cell 0 = LSTM, 1 = GRU) in one direction over every time
 * step (kernels/rnn.c). desc = [T, B, H, I, x strides (3), w_ih strides (2),
 * w_hh strides (2), h0 strides (2), c0 strides (2), b_ih, b_hh and peep
 * strides, reverse, onnx gate order, input_forget, linear_before_reset].
 * x (T, B, I) is the input, w_ih (G * H, I) and w_hh (G * H, H) the weights,
 * G = 4 (LSTM) or 3 (GRU); b_ih, b_hh (G * H), peep (3 * H, LSTM) may be
 * NULL, c0 is ignored for GRU; lens (B, int64) or NULL. out (T + 2, B, H) for
 * LSTM (steps, final h, final c), (T + 1, B, H) for GRU, contiguous. clip > 0
 * clips every gate's input to [-clip, clip]. */
CD_API int cd_rnn(int32_t dtype, int32_t cell, const int64_t *desc, const void *x, const void *w_ih, const void *w_hh,
                  const void *b_ih, const void *b_hh, const void *h0, const void *c0, const void *peep,
                  const int64_t *lens, void *out, double clip);

/* ---- sorting ----------------------------------------------------------- */
/* The first k (0 <= k <= n) elements of each row's stable order along the last
 * dim (kernels/sort.c): lay = [ndim, shape, x strides], n = shape[ndim - 1];
 * values (rows, k) in x's dtype and indices (rows, k) contiguous. Ascending
 * unless descending; -0.0 equals 0.0, NaN is above every number; equal values
 * keep their index order. k = n sorts the rows. */
CD_API int cd_sort(int32_t dtype, const int64_t *lay, const void *x, int64_t k, int32_t descending, void *values,
                   uint32_t *indices);

/* ---- products with weights packed once (kernels/panels.c) -------------- */
/* out (batch, ceil(rows / 16), depth, 16) f32: each of the batch's rows x depth
 * matrices of w in panels of 16 rows, out[b][p][d][i] = w[b][16p + i][d] (0 past
 * the last row). lay = [batch, rows, depth, w's three strides]. */
CD_API int cd_pack_panels(int32_t dtype, const int64_t *lay, const void *w, void *out);
/* out (m x n, contiguous) = act(x @ M^T + bias) for wp = cd_pack_panels of M (n x k):
 * desc = [m, n, k, x's row stride, x's column stride]; bias NULL or n values. */
CD_API int cd_linear_panels(int32_t dtype, const int64_t *desc, const void *x, const void *wp, const void *bias,
                            void *out, int32_t act, double alpha, double beta);
/* out = act(conv2d(x, w) + bias + res) * scale + shift for wp = cd_pack_panels of
 * each group's (c_out / groups) x (c_in / groups * kh * kw) matrix of w (of the
 * c_out x (kh * kw) matrix of all channels for a depthwise w: one input and one
 * output channel per group); p as for cd_conv2d; lay = x's four strides; bias
 * NULL or c_out values; res NULL or contiguous shaped as out. */
CD_API int cd_conv2d_panels(int32_t dtype, const int64_t *p, const int64_t *lay, const void *x, const void *wp,
                            const void *bias, const void *res, void *out, int32_t act, double alpha, double beta,
                            double scale, double shift);

/* ---- int8 products of quantized models (kernels/int8.c) ---------------- */
/* params = [scale, zero point] of the dynamic u8 quantization of n contiguous
 * f32 values (ONNX DynamicQuantizeLinear: the range widened to include 0,
 * scale 1 for a constant 0); q = saturate(round_half_even(x / scale) + zp). */
CD_API int cd_quantize_u8_params(int64_t n, const float *x, float *params);
CD_API int cd_quantize_u8(int64_t n, const float *x, const float *params, uint8_t *q);
/* out: the int8 weights B (k x n, u8 (stored minus 128) or i16 holding -128..127)
 * in panels of 16 columns, each column's 4 consecutive k in 32 bits:
 * ceil(n/16) * ceil(k/4) * 64 bytes, then ceil(n/16) * 16 int32 column sums.
 * lay = [k, n, B's two strides]. */
CD_API int cd_pack_int8_panels(int32_t dtype, const int64_t *lay, const void *b, uint8_t *out);
/* out (m x n) = (a - a_zp) @ (B - b_zp): int32 when a_scale is NULL, else f32
 * times a_scale[0] * b_scale[j] (+ bias[j]). a: m rows of k u8 (row stride
 * lda); a_zp NULL or one u8; bp from cd_pack_int8_panels; b_zp NULL, one or n
 * int32 in the stored (signed) domain; desc = [m, n, k, lda, count of b_zp,
 * count of b_scale]. k <= 65536. */
CD_API int cd_matmul_int8(const int64_t *desc, const uint8_t *a, const uint8_t *a_zp, const void *bp,
                          const int32_t *b_zp, const float *a_scale, const float *b_scale, const float *bias,
                          void *out);

/* ---- GGML block quantization ------------------------------------------ */
/* nrows rows of ncols contiguous f32 values to and from contiguous blocks of
 * the GGML type `type` (ggml's type id: q4_0 = 2 ... q8_K = 15, iq4_nl = 20,
 * iq4_xs = 23, mxfp4 = 39), bit for bit as ggml's reference codecs; ncols must
 * be a multiple of the type's block size (32 or 256). */
CD_API int cd_quantize(int32_t type, int64_t nrows, int64_t ncols, const float *src, void *dst);
CD_API int cd_dequantize(int32_t type, int64_t nrows, int64_t ncols, const void *src, float *dst);
/* y (m x n, contiguous f32) = x (m x k, contiguous f32) @ W^T, W n rows of k
 * values in blocks of the type (contiguous). */
CD_API int cd_qmatmul(int32_t type, int64_t m, int64_t n, int64_t k, const void *w, const float *x, float *y);
/* W (n rows of k values in blocks of the type) in the packed layout of its type (kernels/quant.h,
 * candle_api/quantized/packed.py): dst takes as many bytes as src, and must not overlap it. */
CD_API int cd_qpack(int32_t type, int64_t n, int64_t k, const void *src, void *dst);
/* As cd_qmatmul, W packed by cd_qpack. */
CD_API int cd_qmatmul_packed(int32_t type, int64_t m, int64_t n, int64_t k, const void *w, const float *x, float *y);
/* out (nids x k, f32) = rows ids (of the index dtype id_dtype) of W (rows x k in
 * blocks of the type); an id outside [0, rows) fails. */
CD_API int cd_qembedding(int32_t type, int64_t rows, int64_t k, const void *w, int32_t id_dtype, int64_t nids,
                         const void *ids, float *out);

/* ---- a decoding step in one call (kernels/decode.c) -------------------
 * One token of one sequence through a Llama-family decoder with quantized
 * weights (no bias), f32 activations, rms norms, a SwiGLU MLP and a cache of
 * batch 1: the bound step of candle_models.decode_step, its kernels called from
 * C. A product is up to CD_DECODE_MAX_PARTS parts written side by side (each
 * part n rows of a type, packed by cd_qpack or not). The cache of a layer is
 * (kv_heads, capacity, head_dim) contiguous per head, heads cache_head_stride
 * apart. work holds 4 * hidden + 2 * width + heads * head_dim + 3 * ffn floats
 * (width = (heads + 2 kv_heads) head_dim). norm_desc: the lay of a (1, 1,
 * hidden) row for cd_norm_last; rope_shape and rope_strides: the roped heads
 * of q/k/v for cd_rope; sdpa_desc: cd_sdpa's desc for one step, its key count
 * set per step. x is the token's embedding (hidden), cos and sin its
 * position's rows, logits the head's n. */
#define CD_DECODE_MAX_PARTS 3
#define CD_DECODE_SDPA_DESC 24
typedef struct {
    int32_t type, packed;
    int64_t n;
    const void *w;
} cd_dpart;
typedef struct {
    int64_t nparts;
    cd_dpart part[CD_DECODE_MAX_PARTS];
} cd_dproj;
typedef struct {
    const float *norm[2];
    double eps[2];
    cd_dproj qkv, o, gu, down;
    float *keys, *values;
    int64_t window; /* the keys a query sees (0: all) */
    double scale;
} cd_dlayer;
typedef struct {
    int64_t n_layers, hidden, heads, kv_heads, head_dim, ffn, capacity, cache_head_stride;
    int32_t interleaved;
    const int64_t *norm_desc, *rope_shape, *rope_strides, *sdpa_desc;
    const cd_dlayer *layers;
    const float *final_norm;
    double final_eps;
    cd_dproj head;
    float *work;
} cd_dplan;
CD_API int cd_decode_step(const cd_dplan *plan, int64_t pos, const float *x, const float *cos, const float *sin,
                          float *logits);

/* ---- an external BLAS on this library's pool (kernels/pooled_blas.c) ---
 * fn is a sequential build's function, called from the pool's threads on
 * tiles of the output whose bounds depend only on the shapes. kind 0:
 * cblas_sgemm_64's signature, 1: cblas_dgemm_64's, 2: cblas_gemm_bf16bf16f32_64's
 * (bf16 A and B, f32 C). Row-major; C (m x n, ldc) = op(A) op(B) for each of
 * batch matrices, A, B and C of matrix i at i*sa, i*sb, i*sc elements. */
CD_API int cd_pooled_gemm(int32_t kind, void *fn, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k,
                          const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, void *c,
                          int64_t ldc, int64_t sc, int64_t batch);
/* y = op(A) x, fn with cblas_?gemv_64's signature (kind 0 f32, 1 f64), row-major A (rows x cols, lda). */
CD_API int cd_pooled_gemv(int32_t kind, void *fn, int32_t trans, int64_t rows, int64_t cols, const void *a,
                          int64_t lda, const void *x, int64_t incx, void *y);
/* r = fn(a) over n contiguous elements of `size` bytes, in chunks: form 0 vm?Func_64(n, a, r, mode),
 * 1 vm?Powx_64(n, a, scalar, r, mode), 2 vm?Pow_64(n, a, b, r, mode). */
CD_API int cd_pooled_vm(int32_t form, void *fn, int32_t size, int64_t n, const void *a, const void *b,
                        double scalar, void *r, int64_t mode);

/* ---- random ----------------------------------------------------------- */
/* Counter-based (Philox4x32-10): element i of a call uses counter offset + i, so
 * the stream does not depend on the thread count. dist 0 = uniform [p0, p1),
 * 1 = normal (mean p0, std p1). Float dtypes only. */
CD_API int cd_random(int32_t dtype, int32_t dist, int64_t n, void *out, uint64_t seed,
                     uint64_t offset, double p0, double p1);

#ifdef __cplusplus
}
#endif
#endif
