/* 2-d convolutions (1-d ones arrive with a height of 1), their transposes and
 * the gradient of a convolution with respect to its kernel.
 *
 * Forward: per (image, group) task, im2col into a (cin/g * kh * kw) x (oh * ow)
 * matrix, then one GEMM against the packed weights. Transposed: one GEMM of
 * the transposed weights against the image, then col2im scatters the columns
 * into the output. Kernel gradient: per image, g (cout x oh*ow) @ col^T, summed
 * over fixed chunks of images and then over the chunks in order. Tasks never
 * depend on the thread count, so results do not either; the GEMMs inside a
 * task run on its thread. bf16/f16 compute in f32. */
#include "kernels/conv.h"
#include "runtime/internal.h"
#include "runtime/isa.h"

int cd_conv_parse(const int64_t *p, conv_params *q) {
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

/* Compute dtype for an input dtype. */
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
    if (dtype == CD_bf16) cd_ops.f32_to_bf16(n, src, dst);
    else if (dtype == CD_f16) cd_ops.f32_to_f16(n, src, dst);
    else memcpy(dst, src, (size_t)(n * cd_dtype_size(dtype)));
}

/* Packs a strided 4-d array into a contiguous compute-type array of the same shape. */
static void pack4(int dtype, int ct, const char *src, const int64_t *st, const int64_t *shape, void *dst) {
    int64_t k = 0;
    for (int64_t a = 0; a < shape[0]; a++)
        for (int64_t b = 0; b < shape[1]; b++)
            for (int64_t i = 0; i < shape[2]; i++)
                for (int64_t j = 0; j < shape[3]; j++)
                    put(ct, dst, k++, load(dtype, src, a * st[0] + b * st[1] + i * st[2] + j * st[3]));
}

void cd_conv_valid_cols(const conv_params *q, int64_t off, int64_t *lo, int64_t *hi) {
    int64_t first = off < 0 ? (-off + q->sw - 1) / q->sw : 0;
    int64_t last = q->w - 1 - off < 0 ? -1 : (q->w - 1 - off) / q->sw;
    *lo = CD_MIN(first, q->ow);
    *hi = CD_MAX(*lo, CD_MIN(last + 1, q->ow));
}

/* col[(ch * kh + i) * kw + j][(oy - oy0) * ow + ox] = x[ch][y][xx] for the rows
 * [r0, r1) and output rows [oy0, oy1) (zero where the tap falls in the padding).
 * f32 rows copy directly. */
void cd_conv_im2col(int dtype, int ct, const conv_params *q, const int64_t *xs, const char *x, void *col,
                    int64_t r0, int64_t r1, int64_t oy0, int64_t oy1) {
    const int64_t n = (oy1 - oy0) * q->ow;
    const size_t csz = (size_t)cd_dtype_size(ct); /* 0.0 is all zero bits in f32 and f64 */
    char *cols = col;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t j = r % q->kw, i = (r / q->kw) % q->kh, ch = r / (q->kw * q->kh);
        int64_t lo, hi;
        cd_conv_valid_cols(q, j * q->dw - q->pw, &lo, &hi);
        for (int64_t oy = oy0; oy < oy1; oy++) {
            const int64_t y = oy * q->sh - q->ph + i * q->dh, base = r * n + (oy - oy0) * q->ow;
            if (y < 0 || y >= q->h) {
                memset(cols + (size_t)base * csz, 0, (size_t)q->ow * csz);
                continue;
            }
            memset(cols + (size_t)base * csz, 0, (size_t)lo * csz);
            memset(cols + (size_t)(base + hi) * csz, 0, (size_t)(q->ow - hi) * csz);
            const int64_t row = ch * xs[1] + y * xs[2], x0 = lo * q->sw - q->pw + j * q->dw;
            if (dtype == CD_f32) {
                const float *src = (const float *)x + row + x0 * xs[3];
                float *dst = (float *)col + base;
                const int64_t step = q->sw * xs[3];
                if (step == 1) memcpy(dst + lo, src, (size_t)(hi - lo) * sizeof(float));
                else if (step == 2) /* a constant stride (a stride-2 stem): the compiler vectorizes the gather */
                    for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[(ox - lo) * 2];
                else for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[(ox - lo) * step];
            } else {
                for (int64_t ox = lo; ox < hi; ox++)
                    put(ct, col, base + ox, load(dtype, x, row + (x0 + (ox - lo) * q->sw) * xs[3]));
            }
        }
    }
}

/* Depthwise (one input and one output channel per group), f32: taps accumulate straight into the
 * output plane, row by row, instead of an im2col and a one-row GEMM per channel. */
static void depthwise_f32(const conv_params *q, const int64_t *xs, const float *x, const float *w, float *out) {
    memset(out, 0, (size_t)(q->oh * q->ow) * sizeof(float));
    for (int64_t i = 0; i < q->kh; i++)
        for (int64_t j = 0; j < q->kw; j++) {
            const float wv = w[i * q->kw + j];
            int64_t lo, hi;
            cd_conv_valid_cols(q, j * q->dw - q->pw, &lo, &hi);
            if (lo >= hi) continue;
            const int64_t step = q->sw * xs[3];
            for (int64_t oy = 0; oy < q->oh; oy++) {
                const int64_t y = oy * q->sh - q->ph + i * q->dh;
                if (y < 0 || y >= q->h) continue;
                const float *src = x + y * xs[2] + (lo * q->sw - q->pw + j * q->dw) * xs[3];
                float *dst = out + oy * q->ow;
                if (step == 1)
                    for (int64_t ox = lo; ox < hi; ox++) dst[ox] += wv * src[ox - lo];
                else
                    for (int64_t ox = lo; ox < hi; ox++) dst[ox] += wv * src[(ox - lo) * step];
            }
        }
}

/* ---- forward -------------------------------------------------------------------------------- */
typedef struct {
    int dtype, ct;
    const conv_params *q;
    const int64_t *xs;
    const char *x;
    const char *wmat; /* packed weights, compute type */
    char *out;
} conv_ctx;

static int conv_task(void *vctx, int64_t begin, int64_t end) {
    const conv_ctx *c = vctx;
    const conv_params *q = c->q;
    const int csz = cd_dtype_size(c->ct), isz = cd_dtype_size(c->dtype);
    const int64_t cin_g = q->cin / q->groups, cout_g = q->cout / q->groups, K = cin_g * q->kh * q->kw,
                  N = q->oh * q->ow;
    /* A pointwise (1x1, stride 1, no padding) convolution reads the image in place when its
     * pixels are contiguous: the columns are the image's planes. */
    const int direct = q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->ph == 0 && q->pw == 0 &&
                       c->dtype == c->ct && c->xs[3] == 1 && c->xs[2] == q->w;
    if (c->dtype == CD_f32 && cin_g == 1 && cout_g == 1) {
        for (int64_t t = begin; t < end; t++) { /* t = image * channels + channel */
            const int64_t b = t / q->groups, g = t % q->groups;
            depthwise_f32(q, c->xs, (const float *)c->x + b * c->xs[0] + g * c->xs[1],
                          (const float *)c->wmat + g * K, (float *)c->out + (b * q->cout + g) * N);
        }
        return 0;
    }
    char *col = direct ? NULL : cd_scratch(K * N * csz + 64);
    char *tmp = c->ct != c->dtype ? cd_scratch(cout_g * N * csz + 64) : NULL;
    int rc = ((!direct && !col) || (c->ct != c->dtype && !tmp)) ? -1 : 0;
    for (int64_t t = begin; t < end && rc == 0; t++) { /* t = image * groups + group */
        const int64_t b = t / q->groups, g = t % q->groups;
        const char *image = c->x + (b * c->xs[0] + g * cin_g * c->xs[1]) * isz;
        if (!direct) cd_conv_im2col(c->dtype, c->ct, q, c->xs, image, col, 0, K, 0, q->oh);
        char *dst = c->out + ((b * q->cout + g * cout_g) * N) * isz;
        rc = cd_ops.gemm(c->ct, cout_g, N, K, c->wmat + g * cout_g * K * csz, K, 1, direct ? image : col,
                     direct ? c->xs[1] : N, 1, tmp ? tmp : dst, N);
        if (rc == 0 && tmp) store_out(c->dtype, tmp, dst, cout_g * N);
    }
    cd_scratch_free(col);
    cd_scratch_free(tmp);
    return rc;
}

/* ---- transposed ------------------------------------------------------------------------------ */
/* Adds the columns of one (image, group) into its output planes [co0, co1) (of cout_g x oh x ow at plane). */
static void col2im(int ct, const conv_params *q, int64_t co0, int64_t co1, const void *col, void *plane) {
    const int64_t hw = q->h * q->w, ohw = q->oh * q->ow;
    for (int64_t i = co0 * ohw; i < co1 * ohw; i++) put(ct, plane, i, 0);
    for (int64_t co = co0; co < co1; co++)
        for (int64_t i = 0; i < q->kh; i++)
            for (int64_t j = 0; j < q->kw; j++) {
                const int64_t r = (co * q->kh + i) * q->kw + j;
                for (int64_t y = 0; y < q->h; y++) {
                    const int64_t oy = y * q->sh - q->ph + i * q->dh;
                    if (oy < 0 || oy >= q->oh) continue;
                    for (int64_t xx = 0; xx < q->w; xx++) {
                        const int64_t ox = xx * q->sw - q->pw + j * q->dw;
                        if (ox < 0 || ox >= q->ow) continue;
                        const int64_t o = co * ohw + oy * q->ow + ox;
                        put(ct, plane, o, get(ct, plane, o) + get(ct, col, r * hw + y * q->w + xx));
                    }
                }
            }
}

/* One (image, group) of a transposed convolution: X packed into xmat, col = W_g^T (R x cin_g) @ X
 * (cin_g x HW), W_g being cin_g x R row-major. */
static int convt_columns(const conv_ctx *c, int64_t t, char *xmat, char *col) {
    const conv_params *q = c->q;
    const int csz = cd_dtype_size(c->ct), isz = cd_dtype_size(c->dtype);
    const int64_t b = t / q->groups, g = t % q->groups, cin_g = q->cin / q->groups, HW = q->h * q->w;
    const int64_t R = q->cout / q->groups * q->kh * q->kw, xshape[4] = {1, cin_g, q->h, q->w};
    pack4(c->dtype, c->ct, c->x + (b * c->xs[0] + g * cin_g * c->xs[1]) * isz, c->xs, xshape, xmat);
    return cd_ops.gemm(c->ct, R, HW, cin_g, c->wmat + g * cin_g * R * csz, 1, R, xmat, HW, 1, col, HW);
}

/* Where (image, group) t's output planes start. */
static char *convt_out(const conv_ctx *c, int64_t t) {
    const conv_params *q = c->q;
    return c->out + t * q->cout / q->groups * q->oh * q->ow * cd_dtype_size(c->dtype);
}

/* Task t: (image, group) t whole, on this thread (many of them: one each). */
static int convt_task(void *vctx, int64_t begin, int64_t end) {
    const conv_ctx *c = vctx;
    const conv_params *q = c->q;
    const int csz = cd_dtype_size(c->ct);
    const int64_t cin_g = q->cin / q->groups, cout_g = q->cout / q->groups, R = cout_g * q->kh * q->kw,
                  HW = q->h * q->w, OHW = q->oh * q->ow;
    char *xmat = cd_scratch(cin_g * HW * csz + 64), *col = cd_scratch(R * HW * csz + 64),
         *plane = cd_scratch(cout_g * OHW * csz + 64);
    int rc = (!xmat || !col || !plane) ? -1 : 0;
    for (int64_t t = begin; t < end && rc == 0; t++) {
        rc = convt_columns(c, t, xmat, col);
        if (rc) break;
        col2im(c->ct, q, 0, cout_g, col, plane);
        store_out(c->dtype, plane, convt_out(c, t), cout_g * OHW);
    }
    cd_scratch_free(xmat);
    cd_scratch_free(col);
    cd_scratch_free(plane);
    return rc;
}

typedef struct {
    const conv_ctx *c;
    const char *col;
    char *plane, *out; /* plane: compute type (the output itself when that is the compute type) */
} col2im_ctx;

/* Task t: output channel t of one (image, group) from its columns. */
static int col2im_task(void *vctx, int64_t begin, int64_t end) {
    const col2im_ctx *k = vctx;
    const int64_t ohw = k->c->q->oh * k->c->q->ow;
    col2im(k->c->ct, k->c->q, begin, end, k->col, k->plane);
    if (k->plane != k->out)
        store_out(k->c->dtype, k->plane + begin * ohw * cd_dtype_size(k->c->ct),
                  k->out + begin * ohw * cd_dtype_size(k->c->dtype), (end - begin) * ohw);
    return 0;
}

/* Fewer (image, group) pairs than threads (a batch of one): each in turn, its product and its
 * col2im (by output channels) spread over the pool. */
static int convt_split(const conv_ctx *c) {
    const conv_params *q = c->q;
    const int csz = cd_dtype_size(c->ct);
    const int64_t cin_g = q->cin / q->groups, cout_g = q->cout / q->groups, R = cout_g * q->kh * q->kw,
                  HW = q->h * q->w, OHW = q->oh * q->ow;
    const int in_place = c->dtype == c->ct;
    char *xmat = cd_scratch(cin_g * HW * csz + 64), *col = cd_scratch(R * HW * csz + 64);
    char *plane = in_place ? NULL : cd_scratch(cout_g * OHW * csz + 64);
    int rc = (!xmat || !col || (!in_place && !plane)) ? -1 : 0;
    for (int64_t t = 0; t < q->b * q->groups && rc == 0; t++) {
        rc = convt_columns(c, t, xmat, col);
        col2im_ctx k = {c, col, in_place ? convt_out(c, t) : plane, convt_out(c, t)};
        if (rc == 0) rc = cd_parallel_for(cout_g, CD_MAX(1, 16384 / CD_MAX(1, OHW)), col2im_task, &k);
    }
    cd_scratch_free(xmat);
    cd_scratch_free(col);
    cd_scratch_free(plane);
    return rc;
}

/* Packs the weights and runs one task per (image, group): the forward
 * convolution or the transposed one. */
static int run_conv(int32_t dtype, const int64_t *p, const int64_t *lay, const void *vx, const void *vw, void *vout,
                    int transposed) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("conv is implemented for float dtypes, got %s", cd_dtype_name(dtype));
    conv_params q;
    if (cd_conv_parse(p, &q)) return -1;
    const int ct = ct_of(dtype), csz = cd_dtype_size(ct);
    if (q.b == 0 || q.cout == 0 || q.oh * q.ow == 0) return 0;
    const int64_t wshape[4] = {transposed ? q.cin : q.cout, transposed ? q.cout / q.groups : q.cin / q.groups, q.kh,
                               q.kw};
    /* Contiguous weights of the compute type are used in place (a model's weights, every call). */
    const int64_t *ws = lay + 4;
    const int contiguous = ws[3] == 1 && ws[2] == q.kw && ws[1] == q.kh * q.kw && ws[0] == wshape[1] * q.kh * q.kw;
    char *packed = NULL;
    if (dtype != ct || !contiguous) {
        packed = cd_scratch(wshape[0] * wshape[1] * q.kh * q.kw * csz + 64);
        if (!packed) return -1;
        pack4(dtype, ct, vw, ws, wshape, packed);
    }
    conv_ctx c = {dtype, ct, &q, lay, vx, packed ? packed : vw, vout};
    int rc = transposed && q.b * q.groups < cd_num_threads()
                 ? convt_split(&c)
                 : cd_parallel_for(q.b * q.groups, 1, transposed ? convt_task : conv_task, &c);
    cd_scratch_free(packed);
    return rc;
}

int cd_conv2d(int32_t dtype, const int64_t *p, const int64_t *lay, const void *vx, const void *vw, void *vout) {
    return run_conv(dtype, p, lay, vx, vw, vout, 0);
}

int cd_conv_transpose2d(int32_t dtype, const int64_t *p, const int64_t *lay, const void *vx, const void *vw,
                        void *vout) {
    return run_conv(dtype, p, lay, vx, vw, vout, 1);
}

/* ---- gradient with respect to the kernel ---------------------------------------------------------
 * dw[g][co][r] = sum over images and output positions of gout[b][co][n] * col_b[r][n], for the
 * convolution of x by w that produced gout. Images are summed in fixed chunks of WGRAD_CHUNK. */
enum { WGRAD_CHUNK = 8 };

typedef struct {
    int dtype, ct;
    const conv_params *q;
    const int64_t *xs, *gs;
    const char *x, *gout;
    char *partials; /* one cout x K block per chunk, compute type */
} wgrad_ctx;

static int wgrad_task(void *vctx, int64_t begin, int64_t end) {
    const wgrad_ctx *c = vctx;
    const conv_params *q = c->q;
    const int csz = cd_dtype_size(c->ct), isz = cd_dtype_size(c->dtype);
    const int64_t cin_g = q->cin / q->groups, cout_g = q->cout / q->groups, K = cin_g * q->kh * q->kw,
                  N = q->oh * q->ow;
    const int64_t gshape[4] = {1, cout_g, q->oh, q->ow};
    char *col = cd_scratch(K * N * csz + 64), *gmat = cd_scratch(cout_g * N * csz + 64),
         *prod = cd_scratch(cout_g * K * csz + 64);
    int rc = (!col || !gmat || !prod) ? -1 : 0;
    for (int64_t chunk = begin; chunk < end && rc == 0; chunk++) {
        char *acc = c->partials + chunk * q->cout * K * csz;
        memset(acc, 0, (size_t)(q->cout * K * csz));
        for (int64_t b = chunk * WGRAD_CHUNK; b < CD_MIN(q->b, (chunk + 1) * WGRAD_CHUNK) && rc == 0; b++) {
            for (int64_t g = 0; g < q->groups && rc == 0; g++) {
                const char *image = c->x + (b * c->xs[0] + g * cin_g * c->xs[1]) * isz;
                cd_conv_im2col(c->dtype, c->ct, q, c->xs, image, col, 0, K, 0, q->oh);
                pack4(c->dtype, c->ct, c->gout + (b * c->gs[0] + g * cout_g * c->gs[1]) * isz, c->gs, gshape, gmat);
                /* prod = G (cout_g x N) @ col^T (N x K) */
                rc = cd_ops.gemm(c->ct, cout_g, K, N, gmat, N, 1, col, 1, N, prod, K);
                for (int64_t i = 0; i < cout_g * K && rc == 0; i++) {
                    const int64_t o = g * cout_g * K + i;
                    put(c->ct, acc, o, get(c->ct, acc, o) + get(c->ct, prod, i));
                }
            }
        }
    }
    cd_scratch_free(col);
    cd_scratch_free(gmat);
    cd_scratch_free(prod);
    return rc;
}

int cd_conv2d_backward_weight(int32_t dtype, const int64_t *p, const int64_t *lay, const void *x,
                              const void *gout, void *dw) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("conv is implemented for float dtypes, got %s", cd_dtype_name(dtype));
    conv_params q;
    if (cd_conv_parse(p, &q)) return -1;
    const int ct = ct_of(dtype), csz = cd_dtype_size(ct);
    const int64_t K = q.cin / q.groups * q.kh * q.kw, total = q.cout * K;
    const int64_t chunks = (q.b + WGRAD_CHUNK - 1) / WGRAD_CHUNK;
    if (total == 0) return 0;
    char *partials = cd_scratch(CD_MAX(chunks, 1) * total * csz + 64), *sum = cd_scratch(total * csz + 64);
    int rc = (!partials || !sum) ? -1 : 0;
    for (int64_t i = 0; i < total && rc == 0; i++) put(ct, sum, i, 0);
    if (rc == 0 && chunks) {
        wgrad_ctx c = {dtype, ct, &q, lay, lay + 4, x, gout, partials};
        rc = cd_parallel_for(chunks, 1, wgrad_task, &c);
        for (int64_t k = 0; k < chunks && rc == 0; k++)
            for (int64_t i = 0; i < total; i++) put(ct, sum, i, get(ct, sum, i) + get(ct, partials, k * total + i));
    }
    if (rc == 0) store_out(dtype, sum, dw, total);
    cd_scratch_free(partials);
    cd_scratch_free(sum);
    return rc;
}
