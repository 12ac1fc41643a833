// Convolutions, pooling and resampling of (batch, channels, h, w) images:
// a thread per output element, the window walked directly (1-d ops arrive
// with h = 1). Inputs on any strides (xs, ws: four strides each); outputs
// contiguous. Floats accumulate in f32 (f64 for f64); pooling and
// resampling compute in f64 for every dtype, integers truncating the
// average as the cpu backend does.
#include "scalar.cuh"

// conv2d and conv_transpose2d: p = (b, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, groups, oh, ow,
// oph, opw), then x's strides, then w's.
struct ConvArgs {
    i64 p[18];
    i64 xs[4];
    i64 ws[4];
};
enum { B, CIN, H, W, COUT, KH, KW, SH, SW, PH, PW, DH, DW, GROUPS, OH, OW };

template <typename T>
__device__ void conv2d_impl(T* out, const T* x, const T* w, const ConvArgs& a) {
    typedef typename Acc<T>::type C;
    const i64* p = a.p;
    const i64 n = p[B] * p[COUT] * p[OH] * p[OW], cin_g = p[CIN] / p[GROUPS], cout_g = p[COUT] / p[GROUPS];
    GRID_LOOP(i, n) {
        i64 ox = i % p[OW], oy = i / p[OW] % p[OH], co = i / (p[OW] * p[OH]) % p[COUT], bi = i / (p[OW] * p[OH] * p[COUT]);
        i64 g = co / cout_g;
        C acc = C(0);
        for (i64 ci = 0; ci < cin_g; ++ci) {
            const T* xc = x + bi * a.xs[0] + (g * cin_g + ci) * a.xs[1];
            const T* wc = w + co * a.ws[0] + ci * a.ws[1];
            for (i64 ky = 0; ky < p[KH]; ++ky) {
                i64 iy = oy * p[SH] - p[PH] + ky * p[DH];
                if (iy < 0 || iy >= p[H]) continue;
                for (i64 kx = 0; kx < p[KW]; ++kx) {
                    i64 ix = ox * p[SW] - p[PW] + kx * p[DW];
                    if (ix < 0 || ix >= p[W]) continue;
                    acc += load(xc[iy * a.xs[2] + ix * a.xs[3]]) * load(wc[ky * a.ws[2] + kx * a.ws[3]]);
                }
            }
        }
        out[i] = store<T>(acc);
    }
}
#define CONV2D(T) \
    KERNEL(conv2d_##T, T* out, const T* x, const T* w, ConvArgs a) { conv2d_impl<T>(out, x, w, a); }
FOR_FLOATS(CONV2D)

// The transpose: w is (c_in, c_out / groups, kh, kw); output pixel o takes input pixel i through tap k
// where o = i * s - p + k * d.
template <typename T>
__device__ void conv_transpose2d_impl(T* out, const T* x, const T* w, const ConvArgs& a) {
    typedef typename Acc<T>::type C;
    const i64* p = a.p;
    const i64 n = p[B] * p[COUT] * p[OH] * p[OW], cin_g = p[CIN] / p[GROUPS], cout_g = p[COUT] / p[GROUPS];
    GRID_LOOP(i, n) {
        i64 ox = i % p[OW], oy = i / p[OW] % p[OH], co = i / (p[OW] * p[OH]) % p[COUT], bi = i / (p[OW] * p[OH] * p[COUT]);
        i64 g = co / cout_g, cg = co % cout_g;
        C acc = C(0);
        for (i64 ci = 0; ci < cin_g; ++ci) {
            const T* xc = x + bi * a.xs[0] + (g * cin_g + ci) * a.xs[1];
            const T* wc = w + (g * cin_g + ci) * a.ws[0] + cg * a.ws[1];
            for (i64 ky = 0; ky < p[KH]; ++ky) {
                i64 ty = oy + p[PH] - ky * p[DH];
                if (ty < 0 || ty % p[SH]) continue;
                i64 iy = ty / p[SH];
                if (iy >= p[H]) continue;
                for (i64 kx = 0; kx < p[KW]; ++kx) {
                    i64 tx = ox + p[PW] - kx * p[DW];
                    if (tx < 0 || tx % p[SW]) continue;
                    i64 ix = tx / p[SW];
                    if (ix >= p[W]) continue;
                    acc += load(xc[iy * a.xs[2] + ix * a.xs[3]]) * load(wc[ky * a.ws[2] + kx * a.ws[3]]);
                }
            }
        }
        out[i] = store<T>(acc);
    }
}
#define CONV_T(T) \
    KERNEL(conv_transpose2d_##T, T* out, const T* x, const T* w, ConvArgs a) { conv_transpose2d_impl<T>(out, x, w, a); }
FOR_FLOATS(CONV_T)

// pool2d: q = (b, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, count_include_pad), then x's
// strides; mode 0 max (padded taps ignored, NaN propagates), 1 average (over the taps inside the
// input, or inside the padded input with count_include_pad).
struct PoolArgs {
    i64 q[15];
    i64 xs[4];
};

template <typename T>
__device__ void pool2d_impl(T* out, const T* x, int mode, const PoolArgs& a) {
    const i64* q = a.q;
    const i64 h = q[2], w = q[3], kh = q[4], kw = q[5], sh = q[6], sw = q[7], ph = q[8], pw = q[9], dh = q[10],
              dw = q[11], oh = q[12], ow = q[13];
    const i64 n = q[0] * q[1] * oh * ow;
    GRID_LOOP(i, n) {
        i64 ox = i % ow, oy = i / ow % oh, bc = i / (ow * oh);
        const T* xc = x + bc / q[1] * a.xs[0] + bc % q[1] * a.xs[1];
        double acc = mode == 0 ? -infinity<double>() : 0.0;
        i64 inside = 0, padded = 0;
        bool nan = false;
        for (i64 ky = 0; ky < kh; ++ky) {
            i64 y = oy * sh - ph + ky * dh;
            for (i64 kx = 0; kx < kw; ++kx) {
                i64 xx = ox * sw - pw + kx * dw;
                if (y >= -ph && y < h + ph && xx >= -pw && xx < w + pw) padded++;
                if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
                double v = (double)load(xc[y * a.xs[2] + xx * a.xs[3]]);
                inside++;
                if (mode != 0) acc += v;
                else if (v != v) nan = true;
                else if (v > acc) acc = v;
            }
        }
        double v;
        if (mode == 0) {
            v = nan ? quiet_nan<double>() : acc;
        } else {
            i64 div = q[14] ? padded : inside;
            v = div > 0 ? acc / (double)div : 0.0;
        }
        out[i] = convert<T, f64>(v);
    }
}
#define POOL(T) \
    KERNEL(pool2d_##T, T* out, const T* x, i32 mode, PoolArgs a) { pool2d_impl<T>(out, x, mode, a); }
FOR_NO_I64(POOL)

// upsample: s = (b, c, h, w, oh, ow), then x's strides; mode 0 nearest (src = floor(dst * in / out)),
// 1 bilinear with half-pixel centres, 2 bilinear with the corners aligned.
struct UpArgs {
    i64 s[6];
    i64 xs[4];
};

__device__ __forceinline__ void source(int mode, i64 dst, i64 in, i64 out, i64& i0, i64& i1, double& f) {
    if (mode == 0) {
        i64 i = (i64)((double)dst * (double)in / (double)out);
        i0 = i1 = i < in - 1 ? i : in - 1;
        f = 0.0;
        return;
    }
    double s = mode == 2 ? (out > 1 ? (double)dst * (double)(in - 1) / (double)(out - 1) : 0.0)
                         : mx(((double)dst + 0.5) * (double)in / (double)out - 0.5, 0.0);
    i64 i = (i64)s < in - 1 ? (i64)s : in - 1;
    i0 = i;
    i1 = i + 1 < in - 1 ? i + 1 : in - 1;
    f = s - (double)i;
}

template <typename T>
__device__ void upsample_impl(T* out, const T* x, int mode, const UpArgs& a) {
    const i64* s = a.s;
    const i64 n = s[0] * s[1] * s[4] * s[5];
    GRID_LOOP(i, n) {
        i64 ox = i % s[5], oy = i / s[5] % s[4], bc = i / (s[5] * s[4]);
        const T* xc = x + bc / s[1] * a.xs[0] + bc % s[1] * a.xs[1];
        i64 y0, y1, x0, x1;
        double fy, fx;
        source(mode, oy, s[2], s[4], y0, y1, fy);
        source(mode, ox, s[3], s[5], x0, x1, fx);
        double v00 = (double)load(xc[y0 * a.xs[2] + x0 * a.xs[3]]), v;
        if (mode == 0) {
            v = v00;
        } else {
            double v01 = (double)load(xc[y0 * a.xs[2] + x1 * a.xs[3]]);
            double v10 = (double)load(xc[y1 * a.xs[2] + x0 * a.xs[3]]);
            double v11 = (double)load(xc[y1 * a.xs[2] + x1 * a.xs[3]]);
            v = (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
        }
        out[i] = convert<T, f64>(v);
    }
}
#define UPSAMPLE(T) \
    KERNEL(upsample2d_##T, T* out, const T* x, i32 mode, UpArgs a) { upsample_impl<T>(out, x, mode, a); }
FOR_NO_I64(UPSAMPLE)
