/* Index kernels: index_select, gather, scatter / scatter_add and index_add.
 * Every index is checked against its dimension before it is used; a bad one
 * fails the call with a message naming the index, its position and the size. */
#include "runtime/internal.h"

static int check_id_dtype(int32_t id_dtype) {
    return cd_dtype_is_index(id_dtype) ? 0 : cd_fail("indices must be an integer dtype, got %s", cd_dtype_name(id_dtype));
}

static int out_of_range(const char *op, int64_t v, int64_t pos, int64_t size) {
    return cd_fail("%s: index %lld (at position %lld) is out of range for a dimension of size %lld", op,
                   (long long)v, (long long)pos, (long long)size);
}

/* Adds the element at src into dst for dtype (used by the accumulating kernels). */
static void add_elem(int dtype, char *dst, const char *src) {
    switch (dtype) {
    case CD_u8: *(uint8_t *)dst = (uint8_t)(*(uint8_t *)dst + *(const uint8_t *)src); break;
    case CD_u32: *(uint32_t *)dst += *(const uint32_t *)src; break;
    case CD_i16: *(int16_t *)dst = (int16_t)(*(int16_t *)dst + *(const int16_t *)src); break;
    case CD_i32: *(int32_t *)dst += *(const int32_t *)src; break;
    case CD_i64: *(int64_t *)dst += *(const int64_t *)src; break;
    case CD_bf16:
        *(uint16_t *)dst = cd_f32_to_bf16(cd_bf16_to_f32(*(uint16_t *)dst) + cd_bf16_to_f32(*(const uint16_t *)src));
        break;
    case CD_f16:
        *(uint16_t *)dst = cd_f32_to_f16(cd_f16_to_f32(*(uint16_t *)dst) + cd_f16_to_f32(*(const uint16_t *)src));
        break;
    case CD_f32: *(float *)dst += *(const float *)src; break;
    case CD_f64: *(double *)dst += *(const double *)src; break;
    }
}

/* Builds a one-operand layout over dims [d0, d1) of shape/strides. */
static void sub_layout(int64_t *lay, const int64_t *shape, const int64_t *strides, int64_t d0, int64_t d1) {
    int64_t n = d1 - d0;
    lay[0] = n;
    for (int64_t i = 0; i < n; i++) {
        lay[1 + i] = shape[d0 + i];
        lay[1 + n + i] = strides[d0 + i];
    }
}

/* Reads [ndim, shape, nrows stride rows, dim, extra] and prepares an iterator
 * over the shape in which stride row zero_row has no step along dim (that
 * operand's position along dim comes from the index). */
static int index_iter(const int64_t *lay, int nrows, int zero_row, cd_iter *it, int64_t *dim, int64_t *extra,
                      int64_t *dim_stride) {
    int64_t ndim = lay[0];
    if (ndim < 1 || ndim > CD_MAX_DIMS) return cd_fail("rank out of range");
    *dim = lay[1 + (nrows + 1) * ndim];
    *extra = lay[2 + (nrows + 1) * ndim];
    if (*dim < 0 || *dim >= ndim) return cd_fail("dim out of range");
    int64_t it_lay[1 + (CD_ITER_OPS + 1) * CD_MAX_DIMS];
    memcpy(it_lay, lay, (size_t)(1 + (nrows + 1) * ndim) * sizeof(int64_t));
    int64_t *stride = &it_lay[1 + (1 + zero_row) * ndim + *dim];
    *dim_stride = *stride;
    *stride = 0;
    return cd_iter_init(it, it_lay, nrows, 0);
}

/* ---- index_select -------------------------------------------------------------- */
typedef struct {
    int isz, id_dtype;
    cd_iter pre, post;
    int64_t n_ids, dim_stride, post_numel;
    const char *x, *ids;
    char *out;
} select_ctx;

static int select_task(void *vctx, int64_t begin, int64_t end) {
    const select_ctx *c = vctx;
    const int inner = c->post.ndim - 1;
    for (int64_t r = begin; r < end; r++) { /* r = pre index * n_ids + j */
        int64_t pre = r / c->n_ids, j = r % c->n_ids;
        cd_pos pp, qp;
        cd_iter_seek(&c->pre, &pp, pre);
        const char *row = c->x + (pp.off[0] + cd_load_index(c->id_dtype, c->ids, j) * c->dim_stride) * c->isz;
        char *o = c->out + r * c->post_numel * c->isz;
        cd_iter_seek(&c->post, &qp, 0);
        for (int64_t cur = 0; cur < c->post_numel;) {
            int64_t n = c->post.shape[inner] - qp.idx[inner];
            cd_gather_run(c->isz, n, row + qp.off[0] * c->isz, c->post.strides[0][inner], o + cur * c->isz);
            cur += n;
            cd_iter_advance(&c->post, &qp, n);
        }
    }
    return 0;
}

int cd_index_select(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *x, const void *ids,
                    int64_t n_ids, void *out) {
    if (check_id_dtype(id_dtype)) return -1;
    int64_t ndim = lay[0];
    if (ndim < 1 || ndim > CD_MAX_DIMS) return cd_fail("rank out of range");
    const int64_t *shape = lay + 1, *strides = lay + 1 + ndim;
    int64_t dim = lay[1 + 2 * ndim];
    if (dim < 0 || dim >= ndim) return cd_fail("dim out of range");
    for (int64_t j = 0; j < n_ids; j++) {
        int64_t v = cd_load_index(id_dtype, ids, j);
        if (v < 0 || v >= shape[dim]) return out_of_range("index_select", v, j, shape[dim]);
    }
    int64_t sub[1 + 2 * CD_MAX_DIMS];
    select_ctx c = {.isz = cd_dtype_size(dtype), .id_dtype = id_dtype, .n_ids = n_ids,
                    .dim_stride = strides[dim], .x = x, .ids = ids, .out = out};
    sub_layout(sub, shape, strides, 0, dim);
    if (cd_iter_init(&c.pre, sub, 1, 0)) return -1;
    sub_layout(sub, shape, strides, dim + 1, ndim);
    if (cd_iter_init(&c.post, sub, 1, 0)) return -1;
    c.post_numel = c.post.numel;
    int64_t rows = c.pre.numel * n_ids;
    if (rows == 0 || c.post_numel == 0) return 0;
    return cd_parallel_for(rows, CD_MAX(1, CD_GRAIN / c.post_numel), select_task, &c);
}

/* ---- gather ----------------------------------------------------------------------- */
typedef struct {
    int isz, id_dtype;
    cd_iter it; /* operands: x (dim stride 0), ids, contiguous out */
    int64_t dim_stride, dim_size;
    const char *x, *ids;
    char *out;
} gather_ctx;

static int gather_task(void *vctx, int64_t begin, int64_t end) {
    const gather_ctx *c = vctx;
    const cd_iter *it = &c->it;
    const int inner = it->ndim - 1;
    cd_pos pos;
    cd_iter_seek(it, &pos, begin);
    for (int64_t cur = begin; cur < end;) {
        int64_t n = CD_MIN(it->shape[inner] - pos.idx[inner], end - cur);
        for (int64_t i = 0; i < n; i++) {
            int64_t ip = pos.off[1] + i * it->strides[1][inner];
            int64_t v = cd_load_index(c->id_dtype, c->ids, ip);
            if (v < 0 || v >= c->dim_size) return out_of_range("gather", v, cur + i, c->dim_size);
            const char *src = c->x + (pos.off[0] + i * it->strides[0][inner] + v * c->dim_stride) * c->isz;
            memcpy(c->out + (cur + i) * c->isz, src, (size_t)c->isz);
        }
        cur += n;
        cd_iter_advance(it, &pos, n);
    }
    return 0;
}

int cd_gather(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *x, const void *ids, void *out) {
    if (check_id_dtype(id_dtype)) return -1;
    gather_ctx c = {.isz = cd_dtype_size(dtype), .id_dtype = id_dtype, .x = x, .ids = ids, .out = out};
    int64_t dim = 0;
    if (index_iter(lay, 2, 0, &c.it, &dim, &c.dim_size, &c.dim_stride)) return -1;
    return cd_parallel_for(c.it.numel, CD_GRAIN, gather_task, &c);
}

/* ---- scatter / scatter_add ------------------------------------------------------
 * Runs on one thread: with duplicate indices the order of writes (or of float
 * additions) must not depend on scheduling. */
int cd_scatter(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *vids, const void *vsrc,
               void *vdst, int32_t accumulate) {
    if (check_id_dtype(id_dtype)) return -1;
    cd_iter it;
    int64_t dim = 0, dst_dim = 0, dst_dim_stride = 0;
    if (index_iter(lay, 3, 2, &it, &dim, &dst_dim, &dst_dim_stride)) return -1;
    const int isz = cd_dtype_size(dtype), inner = it.ndim - 1;
    const char *src = vsrc, *ids = vids;
    char *dst = vdst;
    cd_pos pos;
    cd_iter_seek(&it, &pos, 0);
    for (int64_t cur = 0; cur < it.numel;) {
        int64_t n = it.shape[inner] - pos.idx[inner];
        for (int64_t i = 0; i < n; i++) {
            int64_t v = cd_load_index(id_dtype, ids, pos.off[1] + i * it.strides[1][inner]);
            if (v < 0 || v >= dst_dim) return out_of_range(accumulate ? "scatter_add" : "scatter", v, cur + i, dst_dim);
            const char *s = src + (pos.off[0] + i * it.strides[0][inner]) * isz;
            char *d = dst + (pos.off[2] + i * it.strides[2][inner] + v * dst_dim_stride) * isz;
            if (accumulate) add_elem(dtype, d, s);
            else memcpy(d, s, (size_t)isz);
        }
        cur += n;
        cd_iter_advance(&it, &pos, n);
    }
    return 0;
}

/* ---- index_add ------------------------------------------------------------------ */
int cd_index_add(int32_t dtype, int32_t id_dtype, const int64_t *lay, const void *ids, const void *vsrc,
                 void *vdst) {
    if (check_id_dtype(id_dtype)) return -1;
    int64_t ndim = lay[0];
    if (ndim < 1 || ndim > CD_MAX_DIMS) return cd_fail("rank out of range");
    const int64_t *shape = lay + 1, *strides = lay + 1 + ndim;
    int64_t dim = lay[1 + 2 * ndim], dst_dim = lay[2 + 2 * ndim];
    if (dim < 0 || dim >= ndim) return cd_fail("dim out of range");
    int64_t n_ids = shape[dim];
    for (int64_t j = 0; j < n_ids; j++) {
        int64_t v = cd_load_index(id_dtype, ids, j);
        if (v < 0 || v >= dst_dim) return out_of_range("index_add", v, j, dst_dim);
    }
    int64_t post = 1;
    for (int64_t d = dim + 1; d < ndim; d++) post *= shape[d];
    int64_t sub[1 + 2 * CD_MAX_DIMS];
    cd_iter pre_it, post_it;
    sub_layout(sub, shape, strides, 0, dim);
    if (cd_iter_init(&pre_it, sub, 1, 0)) return -1;
    sub_layout(sub, shape, strides, dim + 1, ndim);
    if (cd_iter_init(&post_it, sub, 1, 0)) return -1;
    const int isz = cd_dtype_size(dtype), inner = post_it.ndim - 1;
    const char *src = vsrc;
    char *dst = vdst;
    cd_pos pp, qp;
    cd_iter_seek(&pre_it, &pp, 0);
    for (int64_t p = 0; p < pre_it.numel; p++) {
        for (int64_t j = 0; j < n_ids; j++) {
            int64_t v = cd_load_index(id_dtype, ids, j);
            const char *s = src + (pp.off[0] + j * strides[dim]) * isz;
            char *d = dst + ((p * dst_dim + v) * post) * isz;
            cd_iter_seek(&post_it, &qp, 0);
            for (int64_t cur = 0; cur < post;) {
                int64_t n = post_it.shape[inner] - qp.idx[inner];
                for (int64_t i = 0; i < n; i++)
                    add_elem(dtype, d + (cur + i) * isz, s + (qp.off[0] + i * post_it.strides[0][inner]) * isz);
                cur += n;
                cd_iter_advance(&post_it, &qp, n);
            }
        }
        cd_iter_advance(&pre_it, &pp, 1);
    }
    return 0;
}
