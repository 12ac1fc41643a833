/* Reductions (sum, prod, max, min, argmax, argmin) over any set of dims, and cumsum.
 *
 * Floats accumulate in double and integers in 64 bits (wrapping), then the
 * result is converted back to the input dtype. max/min propagate NaN and
 * argmax/argmin return the first index of the extreme value (or of the first
 * NaN), as numpy does. When there are few outputs, each output's reduction is
 * split into fixed chunks whose partials are combined in order, so the result
 * does not depend on the number of threads. */
#include <stdlib.h>

#include "runtime/internal.h"
#include "runtime/isa.h"

typedef struct {
    double f;     /* float sum/prod or best value */
    int64_t i;    /* integer sum/prod or best value */
    int64_t idx;  /* flat index of the best value within the reduced dims */
    int has;      /* max/min family: a value has been seen */
} acc_t;

static int is_argop(int op) { return op == CD_REDUCE_argmax || op == CD_REDUCE_argmin; }
static int is_maxop(int op) { return op == CD_REDUCE_max || op == CD_REDUCE_argmax; }

static void acc_init(int op, acc_t *a) {
    a->f = (op == CD_REDUCE_prod) ? 1.0 : 0.0;
    a->i = (op == CD_REDUCE_prod) ? 1 : 0;
    a->idx = 0;
    a->has = 0;
}

/* Folds partial b (covering later indices) into a. */
static void acc_merge(int op, int is_float, acc_t *a, const acc_t *b) {
    switch (op) {
    case CD_REDUCE_sum: a->f += b->f; a->i += b->i; return;
    case CD_REDUCE_prod: a->f *= b->f; a->i *= b->i; return;
    default: break;
    }
    if (!b->has) return;
    if (!a->has) { *a = *b; return; }
    int take;
    if (is_float) {
        if (a->f != a->f) take = 0; /* first NaN wins */
        else if (b->f != b->f) take = 1;
        else take = is_maxop(op) ? b->f > a->f : b->f < a->f;
    } else {
        take = is_maxop(op) ? b->i > a->i : b->i < a->i;
    }
    if (take) *a = *b;
}

/* run_<dtype>: folds a strided run into an accumulator. */
#define REDUCE_DT u8
#include "templates/reduce_run.h"
#define REDUCE_DT u32
#include "templates/reduce_run.h"
#define REDUCE_DT i16
#include "templates/reduce_run.h"
#define REDUCE_DT i32
#include "templates/reduce_run.h"
#define REDUCE_DT i64
#include "templates/reduce_run.h"
#define REDUCE_DT bf16
#include "templates/reduce_run.h"
#define REDUCE_DT f16
#include "templates/reduce_run.h"
#define REDUCE_DT f32
#include "templates/reduce_run.h"
#define REDUCE_DT f64
#include "templates/reduce_run.h"

/* max/min (not arg) of a contiguous f32 run: one vector pass, then the fold
 * of the scalar loop (NaN wins). */
static void run_f32_contig(int op, const float *x, int64_t n, acc_t *a) {
    if (op == CD_REDUCE_sum) {
        a->f += cd_ops.sum_f32(x, n);
        return;
    }
    double v = cd_ops.extreme_f32(x, n, op == CD_REDUCE_max);
    if (!a->has || (a->f == a->f && (v != v || (op == CD_REDUCE_max ? v > a->f : v < a->f)))) a->f = v;
    a->has = 1;
}

static void run_any(int dtype, int op, const char *x, int64_t n, int64_t s, int64_t base, acc_t *a) {
    if (dtype == CD_f32 && s == 1 && n > 0 && (op == CD_REDUCE_sum || op == CD_REDUCE_max || op == CD_REDUCE_min)) {
        run_f32_contig(op, (const float *)x, n, a);
        return;
    }
    switch (dtype) {
#define CD_X(name, code, type) \
    case code: run_##name(op, (const type *)x, n, s, base, a); return;
        CD_DTYPES(CD_X)
#undef CD_X
    }
}

static void store(int dtype, int op, const acc_t *a, char *out, int64_t j) {
    if (is_argop(op)) {
        ((uint32_t *)out)[j] = (uint32_t)a->idx;
        return;
    }
    switch (dtype) {
    case CD_u8: ((uint8_t *)out)[j] = (uint8_t)a->i; break;
    case CD_u32: ((uint32_t *)out)[j] = (uint32_t)a->i; break;
    case CD_i16: ((int16_t *)out)[j] = (int16_t)a->i; break;
    case CD_i32: ((int32_t *)out)[j] = (int32_t)a->i; break;
    case CD_i64: ((int64_t *)out)[j] = a->i; break;
    case CD_bf16: ((uint16_t *)out)[j] = cd_f32_to_bf16((float)a->f); break;
    case CD_f16: ((uint16_t *)out)[j] = cd_f32_to_f16((float)a->f); break;
    case CD_f32: ((float *)out)[j] = (float)a->f; break;
    case CD_f64: ((double *)out)[j] = a->f; break;
    }
}

typedef struct {
    int op, dtype, isz, is_float;
    cd_iter keep, red; /* kept dims (x strides, contiguous out) and reduced dims (x strides) */
    const char *x;
    char *out;
    acc_t *partials;   /* split-row mode: one partial per chunk */
    int64_t chunk;     /* split-row mode: chunk length */
    const char *row;   /* split-row mode: start of the row being reduced */
} reduce_ctx;

/* Reduces the flat range [begin, end) of the reduced dims starting at x. */
static void reduce_range(const reduce_ctx *c, const char *x, int64_t begin, int64_t end, acc_t *a) {
    const cd_iter *r = &c->red;
    const int inner = r->ndim - 1;
    const int64_t s = r->strides[0][inner];
    cd_pos pos;
    cd_iter_seek(r, &pos, begin);
    for (int64_t cur = begin; cur < end;) {
        int64_t n = CD_MIN(r->shape[inner] - pos.idx[inner], end - cur);
        run_any(c->dtype, c->op, x + pos.off[0] * c->isz, n, s, cur, a);
        cur += n;
        cd_iter_advance(r, &pos, n);
    }
}

static int outputs_task(void *vctx, int64_t begin, int64_t end) {
    const reduce_ctx *c = vctx;
    cd_pos pos;
    cd_iter_seek(&c->keep, &pos, begin);
    for (int64_t j = begin; j < end; j++) {
        acc_t a;
        acc_init(c->op, &a);
        reduce_range(c, c->x + pos.off[0] * c->isz, 0, c->red.numel, &a);
        store(c->dtype, c->op, &a, c->out, j);
        cd_iter_advance(&c->keep, &pos, 1);
    }
    return 0;
}

#define SPLIT_GRAIN 65536

static int row_chunk_task(void *vctx, int64_t begin, int64_t end) {
    const reduce_ctx *c = vctx;
    acc_t *a = &c->partials[begin / c->chunk];
    acc_init(c->op, a);
    reduce_range(c, c->row, begin, end, a);
    return 0;
}

int cd_reduce(int32_t op, int32_t dtype, const int64_t *lay, const void *x, void *out) {
    if (op < 0 || op >= CD_REDUCE_COUNT) return cd_fail("bad reduce op %d", op);
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %d", dtype);
    int64_t nk = lay[0];
    if (nk < 0 || nk > CD_MAX_DIMS) return cd_fail("rank out of range");
    const int64_t *rlay = lay + 1 + 2 * nk;
    if (rlay[0] < 0 || rlay[0] > CD_MAX_DIMS) return cd_fail("rank out of range");
    reduce_ctx c = {.op = op, .dtype = dtype, .isz = cd_dtype_size(dtype), .is_float = cd_dtype_is_float(dtype),
                    .x = x, .out = out};
    if (cd_iter_init(&c.keep, lay, 1, 0) || cd_iter_init(&c.red, rlay, 1, 0)) return -1;
    int64_t n_out = c.keep.numel, n_red = c.red.numel;
    if (n_out == 0) return 0;
    if (n_red == 0 && !(op == CD_REDUCE_sum || op == CD_REDUCE_prod))
        return cd_fail("cannot take the max/min of an empty dimension");
    /* The choice depends on the sizes only, never on the thread count. */
    if (n_out >= 16 || n_red < 2 * SPLIT_GRAIN) {
        int64_t grain = CD_MAX(1, CD_GRAIN / CD_MAX(1, n_red));
        return cd_parallel_for(n_out, grain, outputs_task, &c);
    }
    /* Few outputs over long rows: split every row into fixed chunks. */
    c.chunk = cd_chunk_size(n_red, SPLIT_GRAIN);
    int64_t nchunks = (n_red + c.chunk - 1) / c.chunk;
    acc_t *partials = cd_scratch(nchunks * (int64_t)sizeof(acc_t));
    if (!partials) return -1;
    c.partials = partials;
    cd_pos pos;
    cd_iter_seek(&c.keep, &pos, 0);
    int rc = 0;
    for (int64_t j = 0; j < n_out && rc == 0; j++) {
        c.row = c.x + pos.off[0] * c.isz;
        rc = cd_parallel_for(n_red, SPLIT_GRAIN, row_chunk_task, &c);
        acc_t a = partials[0];
        for (int64_t k = 1; k < nchunks; k++) acc_merge(op, c.is_float, &a, &partials[k]);
        store(dtype, op, &a, out, j);
        cd_iter_advance(&c.keep, &pos, 1);
    }
    cd_scratch_free(partials);
    return rc;
}

/* ---- cumsum ---------------------------------------------------------------------- */
typedef struct {
    int dtype, isz;
    int64_t len, xs;   /* length and x stride along the scanned dim */
    int64_t inner;     /* output stride of the scanned dim */
    cd_iter lines;     /* every line: x strides and contiguous output */
    const char *x;
    char *out;
} cumsum_ctx;

#define GEN_CUMSUM(dt, ACC)                                                                   \
    static void cumsum_##dt(const CD_T_##dt *x, int64_t n, int64_t xs, CD_T_##dt *y, int64_t ys) { \
        ACC acc = 0;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                     \
            acc = (ACC)(acc + (ACC)CD_LD_##dt(x[i * xs]));                                    \
            y[i * ys] = CD_ST_##dt((CD_C_##dt)acc);                                           \
        }                                                                                     \
    }
GEN_CUMSUM(u8, uint64_t)
GEN_CUMSUM(u32, uint64_t)
GEN_CUMSUM(i16, int64_t)
GEN_CUMSUM(i32, int64_t)
GEN_CUMSUM(i64, int64_t)
GEN_CUMSUM(bf16, double)
GEN_CUMSUM(f16, double)
GEN_CUMSUM(f32, double)
GEN_CUMSUM(f64, double)

static int cumsum_task(void *vctx, int64_t begin, int64_t end) {
    const cumsum_ctx *c = vctx;
    cd_pos pos;
    cd_iter_seek(&c->lines, &pos, begin);
    for (int64_t j = begin; j < end; j++) {
        const char *x = c->x + pos.off[0] * c->isz;
        char *y = c->out + pos.off[1] * c->isz;
        switch (c->dtype) {
#define CD_X(name, code, type) \
    case code: cumsum_##name((const type *)x, c->len, c->xs, (type *)y, c->inner); break;
            CD_DTYPES(CD_X)
#undef CD_X
        }
        cd_iter_advance(&c->lines, &pos, 1);
    }
    return 0;
}

int cd_cumsum(int32_t dtype, const int64_t *lay, const void *x, void *out) {
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %d", dtype);
    int64_t ndim = lay[0];
    if (ndim < 1 || ndim > CD_MAX_DIMS) return cd_fail("rank out of range");
    const int64_t *shape = lay + 1, *strides = lay + 1 + ndim;
    int64_t dim = lay[1 + 2 * ndim];
    if (dim < 0 || dim >= ndim) return cd_fail("dim %lld out of range", (long long)dim);
    /* Lines: the shape with the scanned dim set to 1, over x and the output. */
    int64_t llay[1 + 3 * CD_MAX_DIMS];
    int64_t ostride = 1;
    llay[0] = ndim;
    for (int64_t d = ndim - 1; d >= 0; d--) {
        llay[1 + d] = d == dim ? 1 : shape[d];
        llay[1 + ndim + d] = strides[d];
        llay[1 + 2 * ndim + d] = ostride;
        ostride *= shape[d];
    }
    int64_t inner = 1;
    for (int64_t d = ndim - 1; d > dim; d--) inner *= shape[d];
    cumsum_ctx c = {.dtype = dtype, .isz = cd_dtype_size(dtype), .len = shape[dim], .xs = strides[dim],
                    .inner = inner, .x = x, .out = out};
    if (cd_iter_init(&c.lines, llay, 2, 0)) return -1;
    if (c.lines.numel == 0 || c.len == 0) return 0;
    return cd_parallel_for(c.lines.numel, CD_MAX(1, CD_GRAIN / c.len), cumsum_task, &c);
}
