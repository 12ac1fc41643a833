/* 2-d convolutions (1-d ones arrive with a height of 1) and their transposes.
 *
 * Forward: im2col into a (cin/g * kh * kw) x (oh * ow) matrix, then one GEMM
 * per (batch, group) against the packed weights. Transposed: one GEMM of the
 * transposed weights against the input, then col2im scatters the columns into
 * the output (each output channel plane is owned by one task, so the sums are
 * ordered the same way on any number of threads). bf16/f16 compute in f32. */
#include "gemm.h"
#include "internal.h"

typedef struct {
    int64_t b, cin, h, w, cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow, oph, opw;
} conv_params;

static int parse(const int64_t *p, conv_params *q) {
    *q = (conv_params){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10],
                       p[11], p[12], p[13], p[14], p[15], p[16], p[17]};
    if (q->groups < 1 || q->cin % q->groups || q->cout % q->groups) return cd_fail("bad conv groups");
    if (q->sh < 1 || q->sw < 1 || q->dh < 1 || q->dw < 1) return cd_fail("bad conv stride or dilation");
    if (q->b < 0 || q->cin < 0 || q->h < 0 || q->w < 0 || q->cout < 0 || q->kh < 1 || q->kw < 1 || q->oh < 0 ||
        q->ow < 0)
        return cd_fail("bad conv sizes");
    return 0;
}

/* Element i of a strided array as a double. */
static double load(int dtype, const void *base, int64_t i) {
    switch (dtype) {
    case CD_bf16: return cd_bf16_to_f32(((const uint16_t *)base)[i]);
    case CD_f16: return cd_f16_to_f32(((const uint16_t *)base)[i]);
    case CD_f32: return ((const float *)base)[i];
    default: return ((const double *)base)[i];
    }
}

/* Compute dtype and its element size for an input dtype. */
static int ct_of(int dtype) { return dtype == CD_f64 ? CD_f64 : CD_f32; }

static void put(int ct, void *base, int64_t i, double v) {
    if (ct == CD_f32) ((float *)base)[i] = (float)v;
    else ((double *)base)[i] = v;
}

static double get(int ct, const void *base, int64_t i) {
    return ct == CD_f32 ? ((const float *)base)[i] : ((const double *)base)[i];
}

/* Writes n compute-type values to the output dtype. */
static void store_out(int dtype, const void *src, void *dst, int64_t n) {
    if (dtype == CD_bf16) cd_f32_to_bf16_n(n, src, dst);
    else if (dtype == CD_f16) cd_f32_to_f16_n(n, src, dst);
    else memcpy(dst, src, (size_t)(n * cd_dtype_size(dtype)));
}

typedef struct {
    int dtype, ct;
    const conv_params *q;
    const int64_t *xs; /* x strides */
    const char *x;     /* x at (batch, first channel of the group) */
    void *col;
} im2col_ctx;

static int im2col_task(void *vctx, int64_t begin, int64_t end) {
    const im2col_ctx *c = vctx;
    const conv_params *q = c->q;
    int64_t n = q->oh * q->ow;
    for (int64_t r = begin; r < end; r++) { /* r = (channel * kh + i) * kw + j */
        int64_t j = r % q->kw, i = (r / q->kw) % q->kh, ch = r / (q->kw * q->kh);
        for (int64_t oy = 0; oy < q->oh; oy++) {
            int64_t y = oy * q->sh - q->ph + i * q->dh;
            for (int64_t ox = 0; ox < q->ow; ox++) {
                int64_t xx = ox * q->sw - q->pw + j * q->dw;
                double v = 0;
                if (y >= 0 && y < q->h && xx >= 0 && xx < q->w)
                    v = load(c->dtype, c->x, ch * c->xs[1] + y * c->xs[2] + xx * c->xs[3]);
                put(c->ct, c->col, r * n + oy * q->ow + ox, v);
            }
        }
    }
    return 0;
}

/* Packs w (strided, 4 dims) into a contiguous compute-type array of the same shape. */
static void pack_weights(int dtype, int ct, const char *w, const int64_t *ws, const int64_t *shape, void *dst) {
    int64_t k = 0;
    for (int64_t a = 0; a < shape[0]; a++)
        for (int64_t b = 0; b < shape[1]; b++)
            for (int64_t i = 0; i < shape[2]; i++)
                for (int64_t j = 0; j < shape[3]; j++)
                    put(ct, dst, k++, load(dtype, w, a * ws[0] + b * ws[1] + i * ws[2] + j * ws[3]));
}

int cd_conv2d(int32_t dtype, const int64_t *p, const int64_t *lay, const void *vx, const void *vw, void *vout) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("conv is implemented for float dtypes, got %s", cd_dtype_name(dtype));
    conv_params q;
    if (parse(p, &q)) return -1;
    const int ct = ct_of(dtype), csz = cd_dtype_size(ct), isz = cd_dtype_size(dtype);
    const int64_t cin_g = q.cin / q.groups, cout_g = q.cout / q.groups;
    const int64_t K = cin_g * q.kh * q.kw, N = q.oh * q.ow;
    const int64_t *xs = lay, *ws = lay + 4;
    const char *x = vx;
    char *out = vout;
    if (q.b == 0 || q.cout == 0 || N == 0) return 0;
    int64_t wshape[4] = {q.cout, cin_g, q.kh, q.kw};
    char *wmat = cd_scratch(q.cout * K * csz + 64);
    char *col = cd_scratch(K * N * csz + 64);
    char *tmp = ct != dtype ? cd_scratch(cout_g * N * csz + 64) : NULL;
    int rc = (!wmat || !col || (ct != dtype && !tmp)) ? -1 : 0;
    if (rc == 0) pack_weights(dtype, ct, vw, ws, wshape, wmat);
    for (int64_t b = 0; b < q.b && rc == 0; b++) {
        for (int64_t g = 0; g < q.groups && rc == 0; g++) {
            im2col_ctx ic = {dtype, ct, &q, xs, x + (b * xs[0] + g * cin_g * xs[1]) * isz, col};
            rc = cd_parallel_for(K, CD_MAX(1, CD_GRAIN / N), im2col_task, &ic);
            if (rc) break;
            char *dst = out + ((b * q.cout + g * cout_g) * N) * isz;
            rc = cd_gemm(ct, cout_g, N, K, wmat + g * cout_g * K * csz, K, 1, col, N, 1, tmp ? tmp : dst, N);
            if (rc == 0 && tmp) store_out(dtype, tmp, dst, cout_g * N);
        }
    }
    cd_scratch_free(wmat);
    cd_scratch_free(col);
    cd_scratch_free(tmp);
    return rc;
}

typedef struct {
    int ct;
    const conv_params *q;
    const void *col; /* (cout_g * kh * kw) x (h * w) */
    void *plane;     /* cout_g x oh x ow, compute type */
} col2im_ctx;

static int col2im_task(void *vctx, int64_t begin, int64_t end) {
    const col2im_ctx *c = vctx;
    const conv_params *q = c->q;
    const int64_t hw = q->h * q->w, ohw = q->oh * q->ow;
    for (int64_t co = begin; co < end; co++) {
        for (int64_t i = 0; i < ohw; i++) put(c->ct, c->plane, co * ohw + i, 0);
        for (int64_t i = 0; i < q->kh; i++)
            for (int64_t j = 0; j < q->kw; j++) {
                int64_t r = (co * q->kh + i) * q->kw + j;
                for (int64_t y = 0; y < q->h; y++) {
                    int64_t oy = y * q->sh - q->ph + i * q->dh;
                    if (oy < 0 || oy >= q->oh) continue;
                    for (int64_t xx = 0; xx < q->w; xx++) {
                        int64_t ox = xx * q->sw - q->pw + j * q->dw;
                        if (ox < 0 || ox >= q->ow) continue;
                        int64_t o = co * ohw + oy * q->ow + ox;
                        put(c->ct, c->plane, o, get(c->ct, c->plane, o) + get(c->ct, c->col, r * hw + y * q->w + xx));
                    }
                }
            }
    }
    return 0;
}

int cd_conv_transpose2d(int32_t dtype, const int64_t *p, const int64_t *lay, const void *vx, const void *vw,
                        void *vout) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("conv is implemented for float dtypes, got %s", cd_dtype_name(dtype));
    conv_params q;
    if (parse(p, &q)) return -1;
    const int ct = ct_of(dtype), csz = cd_dtype_size(ct), isz = cd_dtype_size(dtype);
    const int64_t cin_g = q.cin / q.groups, cout_g = q.cout / q.groups;
    const int64_t R = cout_g * q.kh * q.kw, HW = q.h * q.w, OHW = q.oh * q.ow;
    const int64_t *xs = lay, *ws = lay + 4;
    char *out = vout;
    if (q.b == 0 || q.cout == 0 || OHW == 0) return 0;
    int64_t wshape[4] = {q.cin, cout_g, q.kh, q.kw};
    int64_t xshape[4] = {1, cin_g, q.h, q.w};
    char *wmat = cd_scratch(q.cin * R * csz + 64);
    char *xmat = cd_scratch(cin_g * HW * csz + 64);
    char *col = cd_scratch(R * HW * csz + 64);
    char *plane = cd_scratch(cout_g * OHW * csz + 64);
    int rc = (!wmat || !xmat || !col || !plane) ? -1 : 0;
    if (rc == 0) pack_weights(dtype, ct, vw, ws, wshape, wmat);
    for (int64_t b = 0; b < q.b && rc == 0; b++) {
        for (int64_t g = 0; g < q.groups && rc == 0; g++) {
            const char *xg = (const char *)vx + (b * xs[0] + g * cin_g * xs[1]) * isz;
            pack_weights(dtype, ct, xg, xs, xshape, xmat);
            /* col = W_g^T (R x cin_g) @ X (cin_g x HW); W_g is cin_g x R row-major. */
            rc = cd_gemm(ct, R, HW, cin_g, wmat + g * cin_g * R * csz, 1, R, xmat, HW, 1, col, HW);
            if (rc) break;
            col2im_ctx cc = {ct, &q, col, plane};
            rc = cd_parallel_for(cout_g, 1, col2im_task, &cc);
            if (rc) break;
            store_out(dtype, plane, out + ((b * q.cout + g * cout_g) * OHW) * isz, cout_g * OHW);
        }
    }
    cd_scratch_free(wmat);
    cd_scratch_free(xmat);
    cd_scratch_free(col);
    cd_scratch_free(plane);
    return rc;
}
