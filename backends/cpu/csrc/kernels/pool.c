/* Pooling and resampling over (batch, channels, h, w) views of any strides.
 * Values pass through double, which is exact for every dtype but i64, so i64
 * is refused rather than rounded. */
#include "runtime/internal.h"

static double load(int dtype, const char *base, int64_t i) {
    switch (dtype) {
    case CD_u8: return ((const uint8_t *)base)[i];
    case CD_u32: return ((const uint32_t *)base)[i];
    case CD_i16: return ((const int16_t *)base)[i];
    case CD_i32: return ((const int32_t *)base)[i];
    case CD_i64: return (double)((const int64_t *)base)[i];
    case CD_bf16: return cd_bf16_to_f32(((const uint16_t *)base)[i]);
    case CD_f16: return cd_f16_to_f32(((const uint16_t *)base)[i]);
    case CD_f32: return ((const float *)base)[i];
    default: return ((const double *)base)[i];
    }
}

static void store(int dtype, char *base, int64_t i, double v) {
    switch (dtype) {
    case CD_u8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    case CD_u32: ((uint32_t *)base)[i] = (uint32_t)v; break;
    case CD_i16: ((int16_t *)base)[i] = (int16_t)v; break;
    case CD_i32: ((int32_t *)base)[i] = (int32_t)v; break;
    case CD_i64: ((int64_t *)base)[i] = (int64_t)v; break;
    case CD_bf16: ((uint16_t *)base)[i] = cd_f32_to_bf16((float)v); break;
    case CD_f16: ((uint16_t *)base)[i] = cd_f32_to_f16((float)v); break;
    case CD_f32: ((float *)base)[i] = (float)v; break;
    default: ((double *)base)[i] = v; break;
    }
}

/* ---- pool2d --------------------------------------------------------------------------
 * Max pooling ignores padded taps and propagates NaN; average pooling divides
 * by the taps inside the input, or by those inside the padded input when
 * count_include_pad is set (as PyTorch and ONNX define it). Integer inputs are
 * exact for max and truncate the average. */
typedef struct {
    int dtype, mode;
    int64_t b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, include_pad;
    const int64_t *xs;
    const char *x;
    char *out;
} pool_ctx;

static int pool_task(void *vctx, int64_t begin, int64_t end) {
    const pool_ctx *p = vctx;
    for (int64_t r = begin; r < end; r++) { /* r = (batch * c + channel) * oh + oy */
        int64_t oy = r % p->oh, bc = r / p->oh, ch = bc % p->c, bi = bc / p->c;
        int64_t base = bi * p->xs[0] + ch * p->xs[1];
        for (int64_t ox = 0; ox < p->ow; ox++) {
            int64_t y0 = oy * p->sh - p->ph, x0 = ox * p->sw - p->pw;
            double acc = p->mode == 0 ? -INFINITY : 0;
            int64_t inside = 0, padded = 0;
            int nan = 0;
            for (int64_t i = 0; i < p->kh; i++) {
                int64_t y = y0 + i * p->dh;
                for (int64_t j = 0; j < p->kw; j++) {
                    int64_t xx = x0 + j * p->dw;
                    if (y >= -p->ph && y < p->h + p->ph && xx >= -p->pw && xx < p->w + p->pw) padded++;
                    if (y < 0 || y >= p->h || xx < 0 || xx >= p->w) continue;
                    double v = load(p->dtype, p->x, base + y * p->xs[2] + xx * p->xs[3]);
                    inside++;
                    if (p->mode == 0) {
                        if (v != v) nan = 1;
                        else if (v > acc) acc = v;
                    } else {
                        acc += v;
                    }
                }
            }
            double v;
            if (p->mode == 0) v = nan ? NAN : acc;
            else {
                int64_t div = p->include_pad ? padded : inside;
                v = div > 0 ? acc / (double)div : 0;
            }
            store(p->dtype, p->out, r * p->ow + ox, v);
        }
    }
    return 0;
}

/* pool_task for f32, a row of outputs at a time: each tap adds to every output whose
 * window holds it inside the input (a run of outputs, vectorized); per output the taps
 * come in the same order as there, and NaN stays (a NaN tap or NaN so far wins). The
 * average sums in double as there. */
static void tap_range(int64_t x0, int64_t j, int64_t d, int64_t s, int64_t w, int64_t ow, int64_t *lo, int64_t *hi) {
    /* outputs o with 0 <= o * s + x0 + j * d < w */
    const int64_t first = -(x0 + j * d), last = w - 1 - (x0 + j * d);
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = last < 0 ? 0 : CD_MIN(ow, last / s + 1);
}

static int pool_f32_task(void *vctx, int64_t begin, int64_t end) {
    const pool_ctx *p = vctx;
    const int64_t ys = p->xs[2], xs = p->xs[3], x0 = -p->pw;
    double *sum = p->mode ? cd_scratch(p->ow * (int64_t)sizeof(double)) : NULL;
    if (p->mode && !sum) return -1;
    for (int64_t r = begin; r < end; r++) {
        const int64_t oy = r % p->oh, bc = r / p->oh, y0 = oy * p->sh - p->ph;
        const float *plane = (const float *)p->x + bc / p->c * p->xs[0] + bc % p->c * p->xs[1];
        float *restrict o = (float *)p->out + r * p->ow;
        int64_t rows = 0, pad_rows = 0;
        for (int64_t ox = 0; ox < p->ow; ox++) {
            if (p->mode) sum[ox] = 0;
            else o[ox] = -INFINITY;
        }
        for (int64_t i = 0; i < p->kh; i++) {
            const int64_t y = y0 + i * p->dh;
            pad_rows += y >= -p->ph && y < p->h + p->ph;
            if (y < 0 || y >= p->h) continue;
            rows++;
            for (int64_t j = 0; j < p->kw; j++) {
                int64_t lo, hi;
                tap_range(x0, j, p->dw, p->sw, p->w, p->ow, &lo, &hi);
                if (lo >= hi) continue;
                const float *src = plane + y * ys + (lo * p->sw + x0 + j * p->dw) * xs; /* output lo's tap */
                const int64_t step = p->sw * xs, n = hi - lo;
                double *s = p->mode ? sum + lo : NULL;
                float *restrict t = o + lo;
                if (p->mode)
                    for (int64_t k = 0; k < n; k++) s[k] += src[k * step];
                else
                    for (int64_t k = 0; k < n; k++) {
                        const float v = src[k * step];
                        t[k] = v > t[k] || v != v ? v : t[k];
                    }
            }
        }
        if (p->mode)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                int64_t cols = 0, pad_cols = 0;
                for (int64_t j = 0; j < p->kw; j++) {
                    const int64_t xx = ox * p->sw + x0 + j * p->dw;
                    cols += xx >= 0 && xx < p->w;
                    pad_cols += xx >= -p->pw && xx < p->w + p->pw;
                }
                const int64_t div = p->include_pad ? pad_rows * pad_cols : rows * cols;
                o[ox] = div > 0 ? (float)(sum[ox] / (double)div) : 0.0f;
            }
    }
    cd_scratch_free(sum);
    return 0;
}

int cd_pool2d(int32_t dtype, int32_t mode, const int64_t *q, const int64_t *lay, const void *x, void *out) {
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %d", dtype);
    if (mode != 0 && mode != 1) return cd_fail("bad pool mode %d", mode);
    if (dtype == CD_i64) return cd_fail("pooling is not implemented for i64");
    pool_ctx p = {dtype, mode, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11],
                  q[12], q[13], q[14], lay, x, out};
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1 || p.ph < 0 || p.pw < 0)
        return cd_fail("bad pooling window");
    int64_t rows = p.b * p.c * p.oh;
    if (rows == 0 || p.ow == 0) return 0;
    return cd_parallel_for(rows, CD_MAX(1, CD_GRAIN / (p.ow * p.kh * p.kw)), dtype == CD_f32 ? pool_f32_task : pool_task,
                           &p);
}

/* ---- pool2d backward --------------------------------------------------------------------
 * The gradient of pool2d for x: max pooling sends each window's gradient to
 * the element the forward picked (its first NaN, else its first maximum);
 * average pooling spreads it over the window's taps inside the input with the
 * forward's divisor. One (image, channel) plane per task, so the sums are
 * ordered the same way on any number of threads. g is contiguous (b, c, oh, ow),
 * gx contiguous (b, c, h, w); both compute in double. */
typedef struct {
    const pool_ctx *p;
    const char *g;
    char *gx;
} pool_bwd_ctx;

static int pool_bwd_task(void *vctx, int64_t begin, int64_t end) {
    const pool_bwd_ctx *c = vctx;
    const pool_ctx *p = c->p;
    const int64_t hw = p->h * p->w, ohw = p->oh * p->ow;
    /* the plane of x, its gradient and the output gradient, converted once */
    double *xv = cd_scratch((2 * hw + ohw) * (int64_t)sizeof(double));
    if (!xv) return -1;
    double *acc = xv + hw, *gv = acc + hw;
    for (int64_t bc = begin; bc < end; bc++) {
        const int64_t ch = bc % p->c, bi = bc / p->c, base = bi * p->xs[0] + ch * p->xs[1];
        if (p->mode == 0)
            for (int64_t y = 0; y < p->h; y++)
                for (int64_t xx = 0; xx < p->w; xx++)
                    xv[y * p->w + xx] = load(p->dtype, p->x, base + y * p->xs[2] + xx * p->xs[3]);
        for (int64_t i = 0; i < ohw; i++) gv[i] = load(p->dtype, c->g, bc * ohw + i);
        for (int64_t i = 0; i < hw; i++) acc[i] = 0;
        for (int64_t oy = 0; oy < p->oh; oy++) {
            for (int64_t ox = 0; ox < p->ow; ox++) {
                const double g = gv[oy * p->ow + ox];
                const int64_t y0 = oy * p->sh - p->ph, x0 = ox * p->sw - p->pw;
                int64_t best = -1, inside = 0, padded = 0;
                double bv = -INFINITY;
                int nan = 0;
                for (int64_t i = 0; i < p->kh; i++) {
                    const int64_t y = y0 + i * p->dh;
                    for (int64_t j = 0; j < p->kw; j++) {
                        const int64_t xx = x0 + j * p->dw;
                        if (y >= -p->ph && y < p->h + p->ph && xx >= -p->pw && xx < p->w + p->pw) padded++;
                        if (y < 0 || y >= p->h || xx < 0 || xx >= p->w) continue;
                        inside++;
                        if (p->mode != 0 || nan) continue;
                        const double v = xv[y * p->w + xx];
                        if (v != v) nan = 1, best = y * p->w + xx;
                        else if (best < 0 || v > bv) bv = v, best = y * p->w + xx;
                    }
                }
                if (p->mode == 0) {
                    if (best >= 0) acc[best] += g;
                    continue;
                }
                const int64_t div = p->include_pad ? padded : inside;
                if (div <= 0) continue;
                for (int64_t i = 0; i < p->kh; i++) {
                    const int64_t y = y0 + i * p->dh;
                    for (int64_t j = 0; j < p->kw; j++) {
                        const int64_t xx = x0 + j * p->dw;
                        if (y >= 0 && y < p->h && xx >= 0 && xx < p->w) acc[y * p->w + xx] += g / (double)div;
                    }
                }
            }
        }
        for (int64_t i = 0; i < hw; i++) store(p->dtype, c->gx, bc * hw + i, acc[i]);
    }
    cd_scratch_free(xv);
    return 0;
}

int cd_pool2d_backward(int32_t dtype, int32_t mode, const int64_t *q, const int64_t *lay, const void *x,
                       const void *g, void *gx) {
    if (!cd_dtype_is_float(dtype)) return cd_fail("pooling gradients need a float dtype, got %s", cd_dtype_name(dtype));
    if (mode != 0 && mode != 1) return cd_fail("bad pool mode %d", mode);
    pool_ctx p = {dtype, mode, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11],
                  q[12], q[13], q[14], lay, x, NULL};
    if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1 || p.ph < 0 || p.pw < 0)
        return cd_fail("bad pooling window");
    const int64_t planes = p.b * p.c;
    if (planes == 0 || p.h * p.w == 0) return 0;
    pool_bwd_ctx c = {&p, g, gx};
    return cd_parallel_for(planes, CD_MAX(1, CD_GRAIN / (p.h * p.w + p.oh * p.ow * p.kh * p.kw)), pool_bwd_task, &c);
}

/* ---- upsample2d ------------------------------------------------------------------------
 * nearest: src = floor(dst * in / out); bilinear follows PyTorch's half-pixel
 * rule (align_corners = false) or maps the corners onto each other. */
typedef struct {
    int dtype, mode;
    int64_t b, c, h, w, oh, ow;
    const int64_t *xs;
    const char *x;
    char *out;
    const int64_t *cols; /* nearest, 4-byte values: each output column's source offset (xs[3] applied) */
} up_ctx;

/* Nearest, 4-byte values: a row is gathered through the column table, and a row whose
 * source row is the previous one's (an upsampling repeats rows) is copied from it. */
static void up_nearest_rows(const up_ctx *u, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) { /* r = (batch * c + channel) * oh + oy */
        const int64_t oy = r % u->oh, bc = r / u->oh, y = oy * u->h / u->oh;
        uint32_t *dst = (uint32_t *)u->out + r * u->ow;
        if (oy > 0 && r > begin && (oy - 1) * u->h / u->oh == y) {
            memcpy(dst, dst - u->ow, (size_t)u->ow * sizeof(uint32_t));
            continue;
        }
        const uint32_t *src = (const uint32_t *)u->x + bc / u->c * u->xs[0] + bc % u->c * u->xs[1] + y * u->xs[2];
        for (int64_t ox = 0; ox < u->ow; ox++) dst[ox] = src[u->cols[ox]];
    }
}

static void source(int mode, int64_t dst, int64_t in, int64_t out, int64_t *i0, int64_t *i1, double *f) {
    double s;
    if (mode == 0) {
        int64_t i = (int64_t)((double)dst * (double)in / (double)out);
        *i0 = *i1 = CD_MIN(i, in - 1);
        *f = 0;
        return;
    }
    if (mode == 2) s = out > 1 ? (double)dst * (double)(in - 1) / (double)(out - 1) : 0;
    else s = CD_MAX(((double)dst + 0.5) * (double)in / (double)out - 0.5, 0.0);
    int64_t i = CD_MIN((int64_t)s, in - 1);
    *i0 = i;
    *i1 = CD_MIN(i + 1, in - 1);
    *f = s - (double)i;
}

static int up_task(void *vctx, int64_t begin, int64_t end) {
    const up_ctx *u = vctx;
    if (u->cols) {
        up_nearest_rows(u, begin, end);
        return 0;
    }
    for (int64_t r = begin; r < end; r++) { /* r = (batch * c + channel) * oh + oy */
        int64_t oy = r % u->oh, bc = r / u->oh, ch = bc % u->c, bi = bc / u->c;
        int64_t base = bi * u->xs[0] + ch * u->xs[1];
        int64_t y0, y1;
        double fy;
        source(u->mode, oy, u->h, u->oh, &y0, &y1, &fy);
        for (int64_t ox = 0; ox < u->ow; ox++) {
            int64_t x0, x1;
            double fx;
            source(u->mode, ox, u->w, u->ow, &x0, &x1, &fx);
            double v00 = load(u->dtype, u->x, base + y0 * u->xs[2] + x0 * u->xs[3]);
            double v;
            if (u->mode == 0) {
                v = v00;
            } else {
                double v01 = load(u->dtype, u->x, base + y0 * u->xs[2] + x1 * u->xs[3]);
                double v10 = load(u->dtype, u->x, base + y1 * u->xs[2] + x0 * u->xs[3]);
                double v11 = load(u->dtype, u->x, base + y1 * u->xs[2] + x1 * u->xs[3]);
                v = (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
            }
            store(u->dtype, u->out, r * u->ow + ox, v);
        }
    }
    return 0;
}

int cd_upsample2d(int32_t dtype, int32_t mode, const int64_t *q, const int64_t *lay, const void *x, void *out) {
    if (dtype < 0 || dtype >= CD_NUM_DTYPES) return cd_fail("bad dtype %d", dtype);
    if (mode < 0 || mode > 2) return cd_fail("bad upsample mode %d", mode);
    if (dtype == CD_i64) return cd_fail("upsampling is not implemented for i64");
    if (mode != 0 && !cd_dtype_is_float(dtype)) return cd_fail("bilinear upsampling needs a float dtype");
    up_ctx u = {dtype, mode, q[0], q[1], q[2], q[3], q[4], q[5], lay, x, out, NULL};
    if (u.h < 1 || u.w < 1 || u.oh < 0 || u.ow < 0) return cd_fail("bad upsample sizes");
    int64_t rows = u.b * u.c * u.oh;
    if (rows == 0 || u.ow == 0) return 0;
    int64_t *cols = NULL;
    if (mode == 0 && cd_dtype_size(dtype) == 4) { /* the source column of floor(dst * in / out), in integers */
        if (!(cols = cd_scratch(u.ow * (int64_t)sizeof(int64_t)))) return -1;
        for (int64_t ox = 0; ox < u.ow; ox++) cols[ox] = ox * u.w / u.ow * lay[3];
        u.cols = cols;
    }
    int rc = cd_parallel_for(rows, CD_MAX(1, CD_GRAIN / u.ow), up_task, &u);
    cd_scratch_free(cols);
    return rc;
}
