/* Matrix products with quantized weights, and rows looked up in them.
 *
 * y = x @ W^T for W (n x k) in a GGML block type and x (m x k) f32. Few rows
 * of x (decode) quantize them once to the type's activation format and take
 * the integer dot products of cd_ops.qdot: the weights stream from memory
 * once, split over the threads by rows of W. Many rows (prefill) decode
 * panels of W and run the GEMM on each, so a prompt costs a GEMM plus one
 * pass of decoding, not one weight stream per row. */
#include "kernels/quant.h"
#include "runtime/internal.h"
#include "runtime/isa.h"

/* From this many rows of x on, decoding W once beats m quantized dot products per weight row: tiles of
 * decoded rows against every row of x, and from QMM_GEMM_MIN_ROWS on, decoded panels and the GEMM. */
#define QMM_TILE_MIN_ROWS 8
#define QMM_GEMM_MIN_ROWS 32
/* Weight rows decoded together in the tile path (cd_ops.dot_rows_f32 takes up to 4). */
#define QMM_TILE_ROWS 4
/* Bytes of f32 weights decoded per GEMM call: the panel stays in L2/L3 while the GEMM reads it. */
#define QMM_PANEL_BYTES (2 << 20)
/* How many weight rows ahead the dot-product path prefetches. */
#define QMM_PREFETCH_ROWS 4
/* Bytes of weights below which a task is not worth a thread. */
#define QMM_GRAIN_BYTES (16 << 10)

static const cd_qtype_info *checked_type(int32_t type, int64_t k, const char *what) {
    const cd_qtype_info *t = cd_qtype(type);
    if (!t) {
        cd_fail("%s: GGML type id %d is not a quantized type candle-api handles", what, (int)type);
        return NULL;
    }
    if (k % t->block_size) {
        cd_fail("%s: %s stores rows in blocks of %d values, and a row of %lld values is not a whole number of "
                "them", what, t->name, (int)t->block_size, (long long)k);
        return NULL;
    }
    return t;
}

/* Contiguous runs of weight rows a thread takes of one decoding product (few rows of x), as ggml splits a
 * matrix-vector product: runs of 16 KiB taken in turn cost a shared counter's cache line each, and their
 * jumps restart the hardware prefetcher's stream. Two a thread, so a late start of one costs less, and none
 * over QMM_DECODE_RUN_BYTES, so that a large matrix still balances a thread that the system holds up. */
#define QMM_DECODE_RUNS_PER_THREAD 2
#define QMM_DECODE_RUN_BYTES (256 << 10)

static int64_t rows_per_task(int64_t row_bytes) { return CD_MAX(1, QMM_GRAIN_BYTES / CD_MAX(1, row_bytes)); }

/* The grain of a product of m rows of x over n units (rows or groups of rows) of unit_bytes each: `grain`,
 * and for a decoding product (m below QMM_TILE_MIN_ROWS) at least that, in no more runs than
 * QMM_DECODE_RUNS_PER_THREAD a thread unless they would pass QMM_DECODE_RUN_BYTES. */
static int64_t product_grain(int64_t m, int64_t n, int64_t unit_bytes, int64_t grain) {
    if (m >= QMM_TILE_MIN_ROWS) return grain;
    const int64_t runs = (int64_t)cd_num_threads() * QMM_DECODE_RUNS_PER_THREAD;
    const int64_t longest = QMM_DECODE_RUN_BYTES / CD_MAX(1, unit_bytes);
    return CD_MAX(grain, CD_MIN((n + runs - 1) / runs, longest));
}

/* ---- few rows: dot products ---------------------------------------------------------------------- */
typedef struct {
    cd_qdot_fn *dot;
    int64_t m, n, k, w_row, act_row, ldy;
    const char *w, *act;
    float *y;
} dots_ctx;

static int dots_task(void *vctx, int64_t begin, int64_t end) {
    const dots_ctx *c = vctx;
    for (int64_t i = 0; i < c->m; i++) { /* the task's weight rows stay in L1/L2 across the rows of x */
        const char *act = c->act + i * c->act_row;
        float *y = c->y + i * c->ldy;
        for (int64_t j = begin; j < end; j++) {
            /* A model's matrices are short streams from memory, each split over the threads: the hardware
             * prefetcher barely ramps up before one ends, so ask for the rows ahead. */
            if (j + QMM_PREFETCH_ROWS < end) {
                const char *ahead = c->w + (j + QMM_PREFETCH_ROWS) * c->w_row;
                for (int64_t b = 0; b < c->w_row; b += 64) __builtin_prefetch(ahead + b, 0, 0);
            }
            y[j] = c->dot(c->k, c->w + j * c->w_row, act);
        }
    }
    return 0;
}

/* The m rows of x quantized for the dot products of type t. */
typedef struct {
    const cd_qtype_info *at;
    int64_t k, tables, row; /* row: bytes per quantized row, tables included */
    const float *x;
    char *act; /* row i's blocks at act + i * row (its tables before them) */
} act_rows;

static int act_task(void *vctx, int64_t begin, int64_t end) {
    const act_rows *a = vctx;
    for (int64_t i = begin; i < end; i++) cd_ops.quantize_act(a->at->id, a->x + i * a->k, a->k, a->act + i * a->row);
    return 0;
}

/* Quantizes x into scratch memory (NULL on failure; release with act_free). */
static int act_quantize(act_rows *a, const cd_qtype_info *t, int64_t m, int64_t k, const float *x) {
    const cd_qtype_info *at = cd_qtype(t->act_type);
    const int64_t blocks = k / at->block_size, tables = at->block_size == CD_QK ? 8 * blocks : 0;
    const int64_t row = (tables + blocks * at->type_size + 7) & ~(int64_t)7; /* rows stay 8-byte aligned */
    char *mem = cd_scratch(m * row);
    *a = (act_rows){at, k, tables, row, x, mem ? mem + tables : NULL};
    if (!mem) return -1;
    return cd_parallel_for(m, CD_MAX(1, CD_GRAIN / CD_MAX(1, k)), act_task, a);
}

static void act_free(act_rows *a) {
    if (a->act) cd_scratch_free(a->act - a->tables);
}

static int run_dots(const cd_qtype_info *t, const act_rows *a, int64_t m, int64_t n, int64_t k, const char *w,
                    float *y, int64_t ldy) {
    dots_ctx c = {cd_ops.qdot[t->id], m, n, k, k / t->block_size * t->type_size, a->row, ldy, w, a->act, y};
    return cd_parallel_for(n, product_grain(m, n, c.w_row, rows_per_task(c.w_row)), dots_task, &c);
}

static int qmatmul_dots(const cd_qtype_info *t, int64_t m, int64_t n, int64_t k, const void *w, const float *x,
                        float *y) {
    act_rows a;
    int rc = act_quantize(&a, t, m, k, x);
    if (rc == 0) rc = run_dots(t, &a, m, n, k, w, y, n);
    act_free(&a);
    return rc;
}

/* ---- a batch of rows: decoded tiles ----------------------------------------------------------------------
 * Each task decodes its weight rows a few at a time into a small f32 tile (in L1) and takes their dot
 * products with every row of x: the weights are decoded once whatever m is, and for the m of a decoding
 * batch this costs less than packing panels for a GEMM. */
typedef struct {
    cd_dequant_row_fn *decode;
    int64_t m, n, k, w_row;
    const char *w;
    const float *x;
    float *y;
} tiles_ctx;

static int tiles_task(void *vctx, int64_t begin, int64_t end) {
    const tiles_ctx *c = vctx;
    float *tile = cd_scratch(QMM_TILE_ROWS * c->k * 4);
    if (!tile) return -1;
    for (int64_t j = begin; j < end; j += QMM_TILE_ROWS) {
        const int rows = (int)CD_MIN(QMM_TILE_ROWS, end - j);
        for (int r = 0; r < rows; r++) c->decode(c->w + (j + r) * c->w_row, tile + r * c->k, c->k);
        cd_ops.dot_rows_f32(tile, rows, c->x, c->m, c->k, c->y + j, c->n);
    }
    cd_scratch_free(tile);
    return 0;
}

static int qmatmul_tiles(const cd_qtype_info *t, int64_t m, int64_t n, int64_t k, const char *w, const float *x,
                         float *y) {
    tiles_ctx c = {cd_ops.qdecode[t->id] ? cd_ops.qdecode[t->id] : t->dequantize, m, n, k,
                   k / t->block_size * t->type_size, w, x, y};
    return cd_parallel_for(n, CD_MAX(QMM_TILE_ROWS, rows_per_task(c.w_row)), tiles_task, &c);
}

/* ---- many rows: decoded panels and the GEMM ------------------------------------------------------------
 * With AVX-512 BF16 dot products the panel and x are rounded to bf16 (a quarter of the f32 GEMM's time
 * here, and a smaller error than the weights' own quantization); elsewhere the f32 GEMM runs. */
typedef struct {
    cd_dequant_row_fn *decode;
    int64_t k, w_row;
    const char *w;
    float *out;
    uint16_t *out_bf16; /* NULL: keep f32 */
} decode_ctx;

static int decode_task(void *vctx, int64_t begin, int64_t end) {
    const decode_ctx *c = vctx;
    for (int64_t j = begin; j < end; j++) {
        c->decode(c->w + j * c->w_row, c->out + j * c->k, c->k);
        if (c->out_bf16) cd_ops.f32_to_bf16(c->k, c->out + j * c->k, c->out_bf16 + j * c->k);
    }
    return 0;
}

static int qmatmul_gemm(const cd_qtype_info *t, int64_t m, int64_t n, int64_t k, const char *w, const float *x,
                        float *y) {
    const int64_t w_row = k / t->block_size * t->type_size;
    const int64_t panel_rows = CD_MIN(n, CD_MAX(16, QMM_PANEL_BYTES / (k * 4)));
    const int bf16 = cd_ops.bf16_dot;
    float *panel = cd_scratch(panel_rows * k * 4);
    uint16_t *panel_bf16 = bf16 ? cd_scratch(panel_rows * k * 2) : NULL, *x_bf16 = bf16 ? cd_scratch(m * k * 2) : NULL;
    int rc = panel && (!bf16 || (panel_bf16 && x_bf16)) ? 0 : -1;
    if (rc == 0 && bf16) cd_ops.f32_to_bf16(m * k, x, x_bf16);
    for (int64_t j0 = 0; j0 < n && rc == 0; j0 += panel_rows) {
        const int64_t rows = CD_MIN(panel_rows, n - j0);
        decode_ctx c = {cd_ops.qdecode[t->id] ? cd_ops.qdecode[t->id] : t->dequantize, k, w_row, w + j0 * w_row,
                        panel, panel_bf16};
        rc = cd_parallel_for(rows, rows_per_task(w_row), decode_task, &c);
        /* y[:, j0:j0+rows] = x @ panel^T: the panel read with strides (1, k) is W^T's columns. */
        if (rc == 0)
            rc = bf16 ? cd_ops.gemm(CD_bf16, m, rows, k, x_bf16, k, 1, panel_bf16, 1, k, y + j0, n)
                      : cd_ops.gemm(CD_f32, m, rows, k, x, k, 1, panel, 1, k, y + j0, n);
    }
    cd_scratch_free(panel);
    cd_scratch_free(panel_bf16);
    cd_scratch_free(x_bf16);
    return rc;
}

CD_API int cd_qmatmul(int32_t type, int64_t m, int64_t n, int64_t k, const void *w, const float *x, float *y) {
    if (m < 0 || n < 0 || k < 0) return cd_fail("qmatmul: negative size (m %lld, n %lld, k %lld)", (long long)m,
                                                (long long)n, (long long)k);
    const cd_qtype_info *t = checked_type(type, k, "qmatmul");
    if (!t) return -1;
    if (m == 0 || n == 0) return 0;
    if ((uintptr_t)w % 4 || (uintptr_t)x % 4 || (uintptr_t)y % 4)
        return cd_fail("qmatmul: misaligned buffer (blocks, x and y need 4-byte alignment)");
    if (k == 0) {
        memset(y, 0, (size_t)(m * n) * sizeof(float));
        return 0;
    }
    if (m < QMM_TILE_MIN_ROWS && t->act_type >= 0 && cd_ops.qdot[t->id]) return qmatmul_dots(t, m, n, k, w, x, y);
    if (m < QMM_GEMM_MIN_ROWS) return qmatmul_tiles(t, m, n, k, w, x, y);
    return qmatmul_gemm(t, m, n, k, w, x, y);
}

/* ---- packed weights (kernels/quant_pack.c): groups of 16 rows ----------------------------------------------
 * Every m takes the integer path: each group's tiles stay in L1 while the rows of x pass by a few at a time
 * (cd_ops.qgroup), so a prompt streams the weights once. Without a vector kernel the groups are unpacked and
 * multiplied row by row. */
typedef struct {
    const cd_qtype_info *t;
    const cd_qpack_layout *l;
    cd_qgroup_fn *group;
    cd_qrow_fn *row; /* decode (m = 1), when the ISA table has one */
    int64_t m, n, k, nb, group_bytes;
    const act_rows *a;
    const char *w;
    float *y;
} packed_ctx;

static int packed_task(void *vctx, int64_t g0, int64_t g1) {
    const packed_ctx *c = vctx;
    if (c->row) {
        for (int64_t g = g0; g < g1; g++)
            c->row(c->w + g * c->group_bytes, c->nb, c->a->act, c->y + g * CD_QPACK_GROUP);
        return 0;
    }
    if (c->group) {
        for (int64_t g = g0; g < g1; g++)
            c->group(c->w + g * c->group_bytes, c->nb, c->a->act, c->a->row, c->m, c->y + g * CD_QPACK_GROUP, c->n);
        return 0;
    }
    char *rows = cd_scratch(c->group_bytes);
    if (!rows) return -1;
    const int64_t row_bytes = c->nb * c->t->type_size;
    for (int64_t g = g0; g < g1; g++) {
        cd_qunpack_group(c->t, c->l, c->w + g * c->group_bytes, c->nb, rows);
        for (int64_t i = 0; i < c->m; i++)
            for (int r = 0; r < CD_QPACK_GROUP; r++)
                c->y[i * c->n + g * CD_QPACK_GROUP + r] =
                    cd_ops.qdot[c->t->id](c->k, rows + r * row_bytes, c->a->act + i * c->a->row);
    }
    cd_scratch_free(rows);
    return 0;
}

CD_API int cd_qmatmul_packed(int32_t type, int64_t m, int64_t n, int64_t k, const void *w, const float *x,
                             float *y) {
    if (m < 0 || n < 0 || k < 0) return cd_fail("qmatmul_packed: negative size (m %lld, n %lld, k %lld)",
                                                (long long)m, (long long)n, (long long)k);
    const cd_qtype_info *t = checked_type(type, k, "qmatmul_packed");
    if (!t) return -1;
    const cd_qpack_layout *l = cd_qpack_layout_of(type);
    if (!l) return cd_fail("qmatmul_packed: %s has no packed layout", t->name);
    if (m == 0 || n == 0) return 0;
    if ((uintptr_t)x % 4 || (uintptr_t)y % 4) return cd_fail("qmatmul_packed: misaligned buffer (x and y need 4-byte alignment)");
    if (k == 0) {
        memset(y, 0, (size_t)(m * n) * sizeof(float));
        return 0;
    }
    act_rows a;
    int rc = act_quantize(&a, t, m, k, x);
    const int64_t nb = k / t->block_size, groups = n / CD_QPACK_GROUP, group_bytes = CD_QPACK_GROUP * nb * t->type_size;
    packed_ctx c = {t, l, cd_ops.qgroup[t->id], m == 1 ? cd_ops.qrow[t->id] : NULL, m, n, k, nb, group_bytes, &a, w, y};
    /* a group's work grows with m: keep tasks near the grain in products, not only in bytes */
    const int64_t grain = product_grain(m, groups, group_bytes, CD_MAX(1, rows_per_task(group_bytes) / m));
    if (rc == 0) rc = cd_parallel_for(groups, grain, packed_task, &c);
    /* the rows past the last whole group are in the blocks' own layout */
    if (rc == 0 && n > groups * CD_QPACK_GROUP)
        rc = run_dots(t, &a, m, n - groups * CD_QPACK_GROUP, k, (const char *)w + groups * group_bytes,
                      y + groups * CD_QPACK_GROUP, n);
    act_free(&a);
    return rc;
}

/* ---- rows looked up: an embedding table kept quantized --------------------------------------------- */
typedef struct {
    const cd_qtype_info *t;
    int64_t k, w_row, rows;
    int32_t id_dtype;
    const void *ids;
    const char *w;
    float *out;
} rows_ctx;

static int rows_task(void *vctx, int64_t begin, int64_t end) {
    const rows_ctx *c = vctx;
    for (int64_t i = begin; i < end; i++) {
        const int64_t id = cd_load_index(c->id_dtype, c->ids, i);
        if (id < 0 || id >= c->rows)
            return cd_fail("qembedding: index %lld is out of range for a dimension of size %lld", (long long)id,
                           (long long)c->rows);
        c->t->dequantize(c->w + id * c->w_row, c->out + i * c->k, c->k);
    }
    return 0;
}

CD_API int cd_qembedding(int32_t type, int64_t rows, int64_t k, const void *w, int32_t id_dtype, int64_t nids,
                         const void *ids, float *out) {
    if (rows < 0 || k < 0 || nids < 0) return cd_fail("qembedding: negative size");
    if (!cd_dtype_is_index(id_dtype))
        return cd_fail("qembedding: ids must be of an integer dtype, got %s", cd_dtype_name(id_dtype));
    const cd_qtype_info *t = checked_type(type, k, "qembedding");
    if (!t) return -1;
    if ((uintptr_t)w % 4 || (uintptr_t)out % 4)
        return cd_fail("qembedding: misaligned buffer (blocks need 4-byte alignment)");
    rows_ctx c = {t, k, k / t->block_size * t->type_size, rows, id_dtype, ids, w, out};
    return cd_parallel_for(nids, CD_MAX(1, 4096 / CD_MAX(1, k)), rows_task, &c);
}
