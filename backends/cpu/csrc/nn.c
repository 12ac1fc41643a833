/* Fused row kernels over the last dim (softmax, log_softmax, layer_norm,
 * rms_norm) and rotary embeddings. Rows of any stride are gathered into a
 * compute-type buffer (f32, or f64 for f64 inputs); statistics use two passes
 * for stability. */
#include "internal.h"

static int ct_size(int dtype) { return dtype == CD_f64 ? 8 : 4; }

/* Loads n elements (stride s) of dtype into a compute-type buffer. */
static void load_row(int dtype, const char *x, int64_t n, int64_t s, void *dst) {
    switch (dtype) {
    case CD_bf16:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = cd_bf16_to_f32(((const uint16_t *)x)[i * s]);
        break;
    case CD_f16:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = cd_f16_to_f32(((const uint16_t *)x)[i * s]);
        break;
    case CD_f32:
        if (s == 1) memcpy(dst, x, (size_t)n * 4);
        else cd_gather_run(4, n, x, s, dst);
        break;
    default:
        if (s == 1) memcpy(dst, x, (size_t)n * 8);
        else cd_gather_run(8, n, x, s, dst);
        break;
    }
}

static void store_row(int dtype, const void *src, int64_t n, char *out) {
    switch (dtype) {
    case CD_bf16: cd_f32_to_bf16_n(n, src, (uint16_t *)out); break;
    case CD_f16: cd_f32_to_f16_n(n, src, (uint16_t *)out); break;
    default: memcpy(out, src, (size_t)(n * cd_dtype_size(dtype))); break;
    }
}

#define GEN_SOFTMAX(T, S)                                                    \
    static void softmax_##T(T *v, int64_t n, int take_log) {                   \
        T mx = -INFINITY;                                                    \
        for (int64_t i = 0; i < n; i++) mx = v[i] > mx || v[i] != v[i] ? v[i] : mx; \
        double sum = 0;                                                      \
        if (take_log) {                                                      \
            for (int64_t i = 0; i < n; i++) sum += exp##S(v[i] - mx);       \
            T lse = mx + (T)log(sum);                                       \
            for (int64_t i = 0; i < n; i++) v[i] -= lse;                     \
        } else {                                                             \
            for (int64_t i = 0; i < n; i++) {                                \
                v[i] = exp##S(v[i] - mx);                                    \
                sum += v[i];                                                 \
            }                                                                \
            T inv = (T)(1.0 / sum);                                          \
            for (int64_t i = 0; i < n; i++) v[i] *= inv;                     \
        }                                                                    \
    }
GEN_SOFTMAX(float, f)
GEN_SOFTMAX(double, )

#define GEN_NORM(T, S)                                                                    \
    static void norm_##T(T *v, int64_t n, const T *w, const T *b, double eps, int rms) {  \
        double mean = 0, var = 0;                                                         \
        if (!rms) {                                                                       \
            for (int64_t i = 0; i < n; i++) mean += v[i];                                 \
            mean /= (double)n;                                                            \
        }                                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                 \
            double d = v[i] - mean;                                                       \
            var += d * d;                                                                 \
        }                                                                                 \
        T scale = (T)(1.0 / sqrt(var / (double)n + eps)), m = (T)mean;                   \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T y = (v[i] - m) * scale * w[i];                                              \
            v[i] = b ? y + b[i] : y;                                                      \
        }                                                                                 \
    }
GEN_NORM(float, f)
GEN_NORM(double, )

enum { ROW_SOFTMAX, ROW_NORM };

typedef struct {
    int kind, dtype, log, rms;
    cd_iter rows;    /* outer dims: x strides */
    int64_t n, xs;   /* last dim and its stride */
    const char *x;
    char *out;
    const void *w, *b; /* compute-type copies of the affine params */
    double eps;
} row_ctx;

static int row_task(void *vctx, int64_t begin, int64_t end) {
    const row_ctx *c = vctx;
    const int isz = cd_dtype_size(c->dtype);
    void *buf = cd_scratch(c->n * ct_size(c->dtype));
    if (!buf) return -1;
    cd_pos pos;
    cd_iter_seek(&c->rows, &pos, begin);
    for (int64_t r = begin; r < end; r++) {
        load_row(c->dtype, c->x + pos.off[0] * isz, c->n, c->xs, buf);
        if (c->kind == ROW_SOFTMAX) {
            if (c->dtype == CD_f64) softmax_double(buf, c->n, c->log);
            else softmax_float(buf, c->n, c->log);
        } else {
            if (c->dtype == CD_f64) norm_double(buf, c->n, c->w, c->b, c->eps, c->rms);
            else norm_float(buf, c->n, c->w, c->b, c->eps, c->rms);
        }
        store_row(c->dtype, buf, c->n, c->out + r * c->n * isz);
        cd_iter_advance(&c->rows, &pos, 1);
    }
    cd_scratch_free(buf);
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

int cd_softmax_last(int32_t dtype, const int64_t *lay, const void *x, void *out, int32_t log) {
    row_ctx c = {.kind = ROW_SOFTMAX, .dtype = dtype, .log = log, .x = x, .out = out};
    if (init_rows(&c, lay)) return -1;
    return run_rows(&c);
}

int cd_norm_last(int32_t dtype, const int64_t *lay, const void *x, const void *w, const void *b, void *out,
                 double eps, int32_t rms) {
    row_ctx c = {.kind = ROW_NORM, .dtype = dtype, .rms = rms, .x = x, .out = out, .eps = eps};
    if (init_rows(&c, lay)) return -1;
    if (c.n == 0) return 0;
    /* Weights in the compute type, once. */
    char *params = cd_scratch(2 * c.n * ct_size(dtype));
    if (!params) return -1;
    load_row(dtype, w, c.n, 1, params);
    c.w = params;
    if (b && !rms) {
        load_row(dtype, b, c.n, 1, params + c.n * ct_size(dtype));
        c.b = params + c.n * ct_size(dtype);
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
    const int isz = cd_dtype_size(c->dtype), csz = ct_size(c->dtype);
    const int64_t d = c->d, half = d / 2;
    /* x row, output row, cos row, sin row in the compute type */
    char *buf = cd_scratch(3 * d * csz);
    if (!buf) return -1;
    char *v = buf, *o = buf + d * csz, *co = buf + 2 * d * csz, *si = co + half * csz;
    for (int64_t r = begin; r < end; r++) { /* r = (bi * h + hi) * t + ti */
        int64_t ti = r % c->t, hi = (r / c->t) % c->h, bi = r / (c->t * c->h);
        int64_t cs_row = ((c->per_batch ? bi * c->t : 0) + ti) * half;
        load_row(c->dtype, c->x + (bi * c->xs[0] + hi * c->xs[1] + ti * c->xs[2]) * isz, d, c->xs[3], v);
        load_row(c->dtype, c->cos + cs_row * isz, half, 1, co);
        load_row(c->dtype, c->sin + cs_row * isz, half, 1, si);
        if (c->dtype == CD_f64) rope_row_double((double *)v, (double *)co, (double *)si, (double *)o, half, c->interleaved);
        else rope_row_float((float *)v, (float *)co, (float *)si, (float *)o, half, c->interleaved);
        store_row(c->dtype, o, d, c->out + r * d * isz);
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
