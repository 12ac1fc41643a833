/* Fused scaled-dot-product attention:
 *     out = softmax(q @ k^T * scale + mask) @ v     over the last two dims,
 * for any batch dims (broadcast through zero strides).
 *
 * Flash-attention style: a task takes one batch entry and a block of BQ query
 * rows and walks the keys in blocks of BK with an online softmax (a running
 * max and sum per row; the partial output is rescaled when the max grows), so
 * no more than a BQ x BK block of scores exists at any time. Both products go
 * through the GEMM of the chosen instruction set (but the scores of a few f32
 * query rows, which take dot products): f32 and f64 operands are
 * read in place at their strides, f16/bf16 blocks are converted to f32 first.
 * Causal masking is PyTorch's (query i sees keys j <= i); key blocks wholly
 * above the diagonal are skipped. A row whose every score is -inf (fully
 * masked) gives zeros, as PyTorch's math backend does. */
#include "runtime/internal.h"
#include "runtime/isa.h"

enum { BQ = 64, BK = 256 };
enum { Q, K, V, M }; /* operand slots in the stride tables */

typedef struct {
    int dtype, mdtype, causal, has_mask;
    int64_t nb, L, S, E, Ev, qblocks;
    const int64_t *bshape;
    const int64_t *st[4]; /* per operand: nb batch strides, then row and column strides */
    const char *ptr[4];
    char *out;
    double scale;
} sdpa_ctx;

/* Element offsets of batch entry bi in each operand. */
static void batch_offsets(const sdpa_ctx *c, int64_t bi, int64_t off[4]) {
    for (int o = 0; o < 4; o++) off[o] = 0;
    for (int64_t d = c->nb - 1; d >= 0; d--) {
        int64_t i = bi % c->bshape[d];
        bi /= c->bshape[d];
        for (int o = 0; o < 4; o++) off[o] += i * c->st[o][d];
    }
}

/* A matrix operand for the GEMM: its pointer and strides. */
typedef struct {
    const void *p;
    int64_t rs, cs;
} operand;

/* rows x cols of operand slot o from (r0, c-offset 0): in place, or for half
 * dtypes converted into buf (rows x cols, contiguous). */
static operand block(const sdpa_ctx *c, int o, int64_t off, int64_t r0, int64_t rows, int64_t cols, float *buf) {
    const int64_t rs = c->st[o][c->nb], cs = c->st[o][c->nb + 1];
    const int isz = cd_dtype_size(c->dtype);
    const char *src = c->ptr[o] + (off + r0 * rs) * isz;
    if (c->dtype == CD_f32 || c->dtype == CD_f64) return (operand){src, rs, cs};
    for (int64_t r = 0; r < rows; r++) cd_load_ct(c->dtype, src + r * rs * isz, cols, cs, buf + r * cols);
    return (operand){buf, cols, 1};
}

#define ATTEND_T float
#define ATTEND_GEMM_DT CD_f32
#define ATTEND_EXP_ROW(x, n) cd_unary_loop(CD_UNARY_exp, CD_f32)(n, x, x)
#define ATTEND_DOT_ROWS 1
#include "templates/attend.h"

#define ATTEND_T double
#define ATTEND_GEMM_DT CD_f64
#define ATTEND_EXP_ROW(x, n) for (int64_t j = 0; j < n; j++) x[j] = exp(x[j])
#define ATTEND_DOT_ROWS 0
#include "templates/attend.h"

/* Buffer bytes for one task: scores, accumulator, block product, row stats,
 * a mask row, and for f16/bf16 the converted Q and K/V blocks. */
static int64_t workspace_bytes(const sdpa_ctx *c) {
    int64_t n = BQ * BK + 2 * BQ * c->Ev + 2 * BQ + BK;
    int64_t bytes = n * cd_ct_size(c->dtype);
    if (c->dtype == CD_f16 || c->dtype == CD_bf16) bytes += (BQ * c->E + BK * CD_MAX(c->E, c->Ev)) * 4;
    return bytes;
}

static int sdpa_task(void *vctx, int64_t begin, int64_t end) {
    const sdpa_ctx *c = vctx;
    void *ws = cd_scratch(workspace_bytes(c));
    if (!ws) return -1;
    int rc = 0;
    for (int64_t t = begin; t < end && rc == 0; t++) {
        int64_t bi = t / c->qblocks, i0 = t % c->qblocks * BQ, rows = CD_MIN(BQ, c->L - i0);
        rc = c->dtype == CD_f64 ? attend_double(c, bi, i0, rows, ws) : attend_float(c, bi, i0, rows, ws);
    }
    cd_scratch_free(ws);
    return rc;
}

int cd_sdpa(int32_t dtype, const int64_t *desc, const void *q, const void *k, const void *v, const void *mask,
            int32_t mask_dtype, void *out, double scale) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("attention needs a float dtype, got %s", cd_dtype_name(dtype));
    sdpa_ctx c = {.dtype = dtype, .mdtype = mask_dtype, .nb = desc[0], .L = desc[1], .S = desc[2], .E = desc[3],
                  .Ev = desc[4], .causal = desc[5] != 0, .has_mask = mask != NULL, .out = out, .scale = scale};
    if (c.nb < 0 || c.nb > CD_MAX_DIMS || c.L < 0 || c.S < 0 || c.E < 0 || c.Ev < 0)
        return cd_fail("attention: bad sizes");
    if (c.has_mask && mask_dtype != CD_u8 && mask_dtype != dtype)
        return cd_fail("attention: the mask must be u8 or %s, got %s", cd_dtype_name(dtype), cd_dtype_name(mask_dtype));
    c.bshape = desc + 6;
    for (int o = 0; o < 4; o++) c.st[o] = desc + 6 + c.nb + o * (c.nb + 2);
    c.ptr[Q] = q, c.ptr[K] = k, c.ptr[V] = v, c.ptr[M] = mask;
    int64_t batches = 1;
    for (int64_t d = 0; d < c.nb; d++) batches *= c.bshape[d];
    c.qblocks = (c.L + BQ - 1) / BQ;
    if (batches == 0 || c.L == 0 || c.Ev == 0) return 0;
    return cd_parallel_for(batches * c.qblocks, 1, sdpa_task, &c);
}
