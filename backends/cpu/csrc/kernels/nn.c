/* Fused row kernels over the last dim (softmax, log_softmax, layer_norm and
 * skip_layer_norm (of x + a residual), rms_norm, bias_gelu) and rotary
 * embeddings. Rows of any stride are gathered into a
 * compute-type buffer (f32, or f64 for f64 inputs); statistics use two passes
 * for stability. */
#include "runtime/internal.h"
#include "runtime/isa.h"

/* f64 rows, in place. */
static void softmax_row_f64(double *v, int64_t n, int take_log) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = v[i] > mx || v[i] != v[i] ? v[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += take_log ? exp(v[i] - mx) : (v[i] = exp(v[i] - mx));
    if (take_log) {
        double lse = mx + log(sum);
        for (int64_t i = 0; i < n; i++) v[i] -= lse;
    } else {
        for (int64_t i = 0; i < n; i++) v[i] /= sum;
    }
}

static void norm_row_f64(double *v, int64_t n, const double *w, const double *b, double eps, int rms) {
    double mean = 0, var = 0;
    if (!rms) {
        for (int64_t i = 0; i < n; i++) mean += v[i];
        mean /= (double)n;
    }
    for (int64_t i = 0; i < n; i++) var += (v[i] - mean) * (v[i] - mean);
    double scale = 1.0 / sqrt(var / (double)n + eps);
    for (int64_t i = 0; i < n; i++) {
        double y = (v[i] - mean) * scale * w[i];
        v[i] = b ? y + b[i] : y;
    }
}

enum { ROW_SOFTMAX, ROW_NORM };

typedef struct {
    int kind, dtype, log, rms;
    cd_iter rows;    /* outer dims: x strides */
    int64_t n, xs;   /* last dim and its stride */
    const char *x;
    const char *res; /* contiguous rows added to x's before the norm (NULL: none) */
    char *out;
    const void *w, *b; /* compute-type copies of the affine params */
    double eps;
} row_ctx;

/* One row of f32 values (src) into f32 dst (may alias). */
static void row_f32(const row_ctx *c, const float *src, float *dst) {
    if (c->kind == ROW_SOFTMAX) cd_ops.softmax_row(src, dst, c->n, c->log);
    else cd_ops.norm_row(src, dst, c->n, c->w, c->b, (float)c->eps, c->rms);
}

static int row_task(void *vctx, int64_t begin, int64_t end) {
    const row_ctx *c = vctx;
    const int isz = cd_dtype_size(c->dtype);
    /* contiguous f32 rows are computed in place: no buffer (its allocation costs more than a small row) */
    void *buf = NULL, *rbuf = NULL;
    const int64_t ctsz = cd_ct_size(c->dtype);
    if (c->dtype != CD_f32 || c->xs != 1 || c->res) {
        buf = cd_scratch(c->n * ctsz * (c->res ? 2 : 1));
        if (!buf) return -1;
        if (c->res) rbuf = (char *)buf + c->n * ctsz;
    }
    cd_pos pos;
    cd_iter_seek(&c->rows, &pos, begin);
    for (int64_t r = begin; r < end; r++) {
        const char *x = c->x + pos.off[0] * isz;
        char *out = c->out + r * c->n * isz;
        if (c->res) { /* the row of x + res in the compute type, then its norm */
            cd_load_ct(c->dtype, x, c->n, c->xs, buf);
            cd_load_ct(c->dtype, c->res + r * c->n * isz, c->n, 1, rbuf);
            if (c->dtype == CD_f64) {
                double *v = buf;
                for (int64_t i = 0; i < c->n; i++) v[i] += ((const double *)rbuf)[i];
                norm_row_f64(v, c->n, c->w, c->b, c->eps, c->rms);
            } else {
                float *v = buf;
                for (int64_t i = 0; i < c->n; i++) v[i] += ((const float *)rbuf)[i];
                row_f32(c, v, v);
            }
            cd_store_ct(c->dtype, buf, c->n, out);
        } else if (c->dtype == CD_f64) {
            cd_load_ct(c->dtype, x, c->n, c->xs, buf);
            if (c->kind == ROW_SOFTMAX) softmax_row_f64(buf, c->n, c->log);
            else norm_row_f64(buf, c->n, c->w, c->b, c->eps, c->rms);
            cd_store_ct(c->dtype, buf, c->n, out);
        } else if (c->dtype == CD_f32 && c->xs == 1) {
            row_f32(c, (const float *)x, (float *)out);
        } else {
            cd_load_ct(c->dtype, x, c->n, c->xs, buf);
            row_f32(c, buf, buf);
            cd_store_ct(c->dtype, buf, c->n, out);
        }
        cd_iter_advance(&c->rows, &pos, 1);
    }
    if (buf) cd_scratch_free(buf);
    return 0;
}

/* Sets up the iterator over all dims but the last. */
static int init_rows(row_ctx *c, const int64_t *lay) {
    int64_t ndim = lay[0];
    if (ndim < 1 || ndim > CD_MAX_DIMS) return cd_fail("row kernels need a rank of at least 1");
    if (!cd_dtype_is_float(c->dtype)) return cd_fail("dtype %s is not a float dtype", cd_dtype_name(c->dtype));
    int64_t sub[1 + 2 * CD_MAX_DIMS];
    sub[0] = ndim - 1;
    for (int64_t d = 0; d < ndim - 1; d++) {
        sub[1 + d] = lay[1 + d];
        sub[ndim + d] = lay[1 + ndim + d];
    }
    c->n = lay[ndim];
    c->xs = lay[2 * ndim];
    return cd_iter_init(&c->rows, sub, 1, 0);
}

static int run_rows(row_ctx *c) {
    if (c->rows.numel == 0 || c->n == 0) return 0;
    return cd_parallel_for(c->rows.numel, CD_MAX(1, CD_GRAIN / c->n), row_task, c);
}

/* The rows and their length when the layout is contiguous, else 0. */
static int64_t contiguous_rows(const int64_t *lay, int64_t *n) {
    int64_t ndim = lay[0], expect = 1;
    const int64_t *shape = lay + 1, *strides = lay + 1 + ndim;
    for (int64_t d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && strides[d] != expect) return 0;
        expect *= shape[d];
    }
    *n = shape[ndim - 1];
    return *n ? expect / *n : 0;
}

int cd_softmax_last(int32_t dtype, const int64_t *lay, const void *x, void *out, int32_t log) {
    /* A small contiguous f32 input is one chunk on one thread whatever the path: its rows in turn, without
     * setting up the iterator (the same row function, so the same bits). */
    int64_t n = 0, rows = lay[0] >= 1 && lay[0] <= CD_MAX_DIMS && dtype == CD_f32 ? contiguous_rows(lay, &n) : 0;
    if (rows && rows * n <= CD_GRAIN) {
        for (int64_t r = 0; r < rows; r++) cd_ops.softmax_row((const float *)x + r * n, (float *)out + r * n, n, log);
        return 0;
    }
    row_ctx c = {.kind = ROW_SOFTMAX, .dtype = dtype, .log = log, .x = x, .out = out};
    if (init_rows(&c, lay)) return -1;
    return run_rows(&c);
}

int cd_norm_last(int32_t dtype, const int64_t *lay, const void *x, const void *res, const void *w, const void *b,
                 void *out, double eps, int32_t rms) {
    row_ctx c = {.kind = ROW_NORM, .dtype = dtype, .rms = rms, .x = x, .res = res, .out = out, .eps = eps};
    if (init_rows(&c, lay)) return -1;
    if (c.n == 0) return 0;
    /* Weights in the compute type, once. */
    char *params = cd_scratch(2 * c.n * cd_ct_size(dtype));
    if (!params) return -1;
    cd_load_ct(dtype, w, c.n, 1, params);
    c.w = params;
    if (b && !rms) {
        cd_load_ct(dtype, b, c.n, 1, params + c.n * cd_ct_size(dtype));
        c.b = params + c.n * cd_ct_size(dtype);
    }
    int rc = run_rows(&c);
    cd_scratch_free(params);
    return rc;
}

/* ---- rope ------------------------------------------------------------------------------ */
typedef struct {
    int dtype, interleaved, per_batch;
    int64_t b, h, t, d;
    const int64_t *xs;
    const char *x;
    const char *cos, *sin;
    char *out;
} rope_ctx;

#define GEN_ROPE_ROW(T)                                                                     \
    static void rope_row_##T(const T *v, const T *co, const T *si, T *o, int64_t half, int inter) { \
        for (int64_t i = 0; i < half; i++) {                                                \
            int64_t i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + half;             \
            o[i1] = v[i1] * co[i] - v[i2] * si[i];                                          \
            o[i2] = v[i1] * si[i] + v[i2] * co[i];                                          \
        }                                                                                   \
    }
GEN_ROPE_ROW(float)
GEN_ROPE_ROW(double)

static int rope_task(void *vctx, int64_t begin, int64_t end) {
    const rope_ctx *c = vctx;
    const int isz = cd_dtype_size(c->dtype), csz = cd_ct_size(c->dtype);
    const int64_t d = c->d, half = d / 2;
    /* x row, output row, cos row, sin row in the compute type */
    char *buf = cd_scratch(3 * d * csz);
    if (!buf) return -1;
    char *v = buf, *o = buf + d * csz, *co = buf + 2 * d * csz, *si = co + half * csz;
    for (int64_t r = begin; r < end; r++) { /* r = (bi * h + hi) * t + ti */
        int64_t ti = r % c->t, hi = (r / c->t) % c->h, bi = r / (c->t * c->h);
        int64_t cs_row = ((c->per_batch ? bi * c->t : 0) + ti) * half;
        cd_load_ct(c->dtype, c->x + (bi * c->xs[0] + hi * c->xs[1] + ti * c->xs[2]) * isz, d, c->xs[3], v);
        cd_load_ct(c->dtype, c->cos + cs_row * isz, half, 1, co);
        cd_load_ct(c->dtype, c->sin + cs_row * isz, half, 1, si);
        if (c->dtype == CD_f64) rope_row_double((double *)v, (double *)co, (double *)si, (double *)o, half, c->interleaved);
        else rope_row_float((float *)v, (float *)co, (float *)si, (float *)o, half, c->interleaved);
        cd_store_ct(c->dtype, o, d, c->out + r * d * isz);
    }
    cd_scratch_free(buf);
    return 0;
}

int cd_rope(int32_t dtype, const int64_t *shape, const int64_t *lay, const void *x, const void *cos,
            const void *sin, void *out, int32_t interleaved, int32_t per_batch) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("rope needs a float dtype, got %s", cd_dtype_name(dtype));
    rope_ctx c = {dtype, interleaved, per_batch, shape[0], shape[1], shape[2], shape[3], lay, x, cos, sin, out};
    if (c.d % 2) return cd_fail("rope needs an even last dim, got %lld", (long long)c.d);
    int64_t rows = c.b * c.h * c.t;
    if (rows == 0 || c.d == 0) return 0;
    return cd_parallel_for(rows, CD_MAX(1, CD_GRAIN / c.d), rope_task, &c);
}

/* ---- silu_mul: SwiGLU's gate ------------------------------------------------------------------- */
typedef struct {
    int dtype;
    int64_t f;
    cd_unary_fn silu; /* of the compute type */
    const char *x;
    char *out;
} silu_mul_ctx;

#define GEN_MUL_ROW(T)                                                                     \
    static void mul_row_##T(T *o, const T *u, int64_t n) {                                 \
        for (int64_t j = 0; j < n; j++) o[j] *= u[j];                                      \
    }
GEN_MUL_ROW(float)
GEN_MUL_ROW(double)

static int silu_mul_task(void *vctx, int64_t begin, int64_t end) {
    const silu_mul_ctx *c = vctx;
    const int isz = cd_dtype_size(c->dtype), csz = cd_ct_size(c->dtype), f64 = c->dtype == CD_f64;
    const int direct = c->dtype == CD_f32 || f64; /* f16 and bf16 go through f32 rows */
    char *buf = direct ? NULL : cd_scratch(3 * c->f * csz);
    if (!direct && !buf) return -1;
    for (int64_t r = begin; r < end; r++) {
        const char *gate = c->x + 2 * r * c->f * isz, *up = gate + c->f * isz;
        char *o = direct ? c->out + r * c->f * isz : buf + 2 * c->f * csz;
        if (!direct) {
            cd_load_ct(c->dtype, gate, c->f, 1, buf);
            cd_load_ct(c->dtype, up, c->f, 1, buf + c->f * csz);
            gate = buf;
            up = buf + c->f * csz;
        }
        c->silu(c->f, gate, o);
        if (f64) mul_row_double((double *)o, (const double *)up, c->f);
        else mul_row_float((float *)o, (const float *)up, c->f);
        if (!direct) cd_store_ct(c->dtype, o, c->f, c->out + r * c->f * isz);
    }
    cd_scratch_free(buf);
    return 0;
}

int cd_silu_mul(int32_t dtype, int64_t rows, int64_t f, const void *x, void *out) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("silu_mul needs a float dtype, got %s", cd_dtype_name(dtype));
    if (rows < 0 || f < 0) return cd_fail("silu_mul: negative size");
    if (rows == 0 || f == 0) return 0;
    silu_mul_ctx c = {dtype, f, cd_unary_loop(CD_UNARY_silu, dtype == CD_f64 ? CD_f64 : CD_f32), x, out};
    return cd_parallel_for(rows, CD_MAX(1, CD_GRAIN / f), silu_mul_task, &c);
}

/* ---- bias_gelu: GELU of x + a bias along the last dim ------------------------------------------ */
typedef struct {
    int dtype;
    int64_t n;
    cd_unary_fn gelu; /* of the compute type */
    const char *x;
    const void *b; /* the bias in the compute type */
    char *out;
} bias_gelu_ctx;

static int bias_gelu_task(void *vctx, int64_t begin, int64_t end) {
    const bias_gelu_ctx *c = vctx;
    const int isz = cd_dtype_size(c->dtype), csz = cd_ct_size(c->dtype), f64 = c->dtype == CD_f64;
    const int direct = c->dtype == CD_f32 || f64; /* f16 and bf16 go through f32 rows */
    char *buf = direct ? NULL : cd_scratch(c->n * csz);
    if (!direct && !buf) return -1;
    for (int64_t r = begin; r < end; r++) {
        const char *x = c->x + r * c->n * isz;
        char *o = direct ? c->out + r * c->n * isz : buf;
        if (!direct) cd_load_ct(c->dtype, x, c->n, 1, buf);
        if (f64)
            for (int64_t j = 0; j < c->n; j++) ((double *)o)[j] = ((const double *)x)[j] + ((const double *)c->b)[j];
        else
            for (int64_t j = 0; j < c->n; j++)
                ((float *)o)[j] = (direct ? ((const float *)x)[j] : ((float *)o)[j]) + ((const float *)c->b)[j];
        c->gelu(c->n, o, o); /* the row is still in cache */
        if (!direct) cd_store_ct(c->dtype, o, c->n, c->out + r * c->n * isz);
    }
    cd_scratch_free(buf);
    return 0;
}

int cd_bias_gelu(int32_t dtype, int64_t rows, int64_t n, const void *x, const void *b, void *out, int32_t tanh) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("bias_gelu needs a float dtype, got %s", cd_dtype_name(dtype));
    if (rows < 0 || n < 0) return cd_fail("bias_gelu: negative size");
    if (rows == 0 || n == 0) return 0;
    const int ct = dtype == CD_f64 ? CD_f64 : CD_f32;
    char *bias = cd_scratch(n * cd_ct_size(dtype));
    if (!bias) return -1;
    cd_load_ct(dtype, b, n, 1, bias);
    bias_gelu_ctx c = {dtype, n, cd_unary_loop(tanh ? CD_UNARY_gelu : CD_UNARY_gelu_erf, ct), x, bias, out};
    int rc = cd_parallel_for(rows, CD_MAX(1, CD_GRAIN / n), bias_gelu_task, &c);
    cd_scratch_free(bias);
    return rc;
}
