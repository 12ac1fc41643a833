// Fused kernels over the last dim: softmax, log_softmax, layer_norm,
// rms_norm; and rotary embeddings. A block per row (blockDim.x a power of
// two from 32 to 256, chosen by the host for the row's length); rows are the
// leading dims of x, walked by the Strided<1> `rows` (x's strides), and the
// last dim steps `step`. Outputs are contiguous. f16 and bf16 compute in
// f32; the statistics are block reductions in a fixed order.
#include "scalar.cuh"

// mode 0: softmax, 1: log_softmax
template <typename T>
__device__ void softmax_impl(T* out, const T* x, i64 n_rows, i64 d, i64 step, int mode, const Strided<1>& rows) {
    typedef typename Acc<T>::type C;
    for (i64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        i64 o[1];
        offsets(rows, r, o);
        const T* xr = x + o[0];
        T* yr = out + r * d;
        C m = -infinity<C>();
        for (i64 j = threadIdx.x; j < d; j += blockDim.x) {
            C v = load(xr[j * step]);
            m = (v > m || v != v) ? v : m;
        }
        m = block_max(m);
        C s = C(0);
        for (i64 j = threadIdx.x; j < d; j += blockDim.x) s += m_exp(load(xr[j * step]) - m);
        s = block_sum(s);
        const C ls = m_log(s);
        for (i64 j = threadIdx.x; j < d; j += blockDim.x) {
            C v = load(xr[j * step]) - m;
            yr[j] = store<T>(mode == 0 ? m_exp(v) / s : v - ls);
        }
    }
}
#define SOFTMAX(T)                                                                                     \
    KERNEL(softmax_##T, T* out, const T* x, i64 n_rows, i64 d, i64 step, i32 mode, Strided<1> rows) {  \
        softmax_impl<T>(out, x, n_rows, d, step, mode, rows);                                          \
    }
FOR_FLOATS(SOFTMAX)

// rms 0: layer_norm, (x - mean) / sqrt(var + eps) * w (+ b when b is not null);
// rms 1: rms_norm, x / sqrt(mean(x^2) + eps) * w. w and b contiguous.
template <typename T>
__device__ void norm_impl(T* out, const T* x, const T* w, const T* b, i64 n_rows, i64 d, i64 step, f64 eps, int rms,
                          const Strided<1>& rows) {
    typedef typename Acc<T>::type C;
    for (i64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        i64 o[1];
        offsets(rows, r, o);
        const T* xr = x + o[0];
        T* yr = out + r * d;
        C mean = C(0);
        if (!rms) {
            C s = C(0);
            for (i64 j = threadIdx.x; j < d; j += blockDim.x) s += load(xr[j * step]);
            mean = block_sum(s) / (C)d;
        }
        C q = C(0);
        for (i64 j = threadIdx.x; j < d; j += blockDim.x) {
            C v = load(xr[j * step]) - mean;
            q += v * v;
        }
        const C inv = C(1) / m_sqrt(block_sum(q) / (C)d + (C)eps);
        for (i64 j = threadIdx.x; j < d; j += blockDim.x) {
            C v = (load(xr[j * step]) - mean) * inv * load(w[j]);
            if (b) v += load(b[j]);
            yr[j] = store<T>(v);
        }
    }
}
#define NORM(T)                                                                                            \
    KERNEL(norm_##T, T* out, const T* x, const T* w, const T* b, i64 n_rows, i64 d, i64 step, f64 eps, i32 rms, \
           Strided<1> rows) {                                                                              \
        norm_impl<T>(out, x, w, b, n_rows, d, step, eps, rms, rows);                                       \
    }
FOR_FLOATS(NORM)

// rope over x (b, h, t, d) on strides xs: pair k of a row takes cos and sin at (batch when
// per_batch,) t, k; the pair is (k, k + d/2) (interleaved 0) or (2k, 2k + 1) (interleaved 1).
template <typename T>
__device__ void rope_impl(T* out, const T* x, const T* cs, const T* sn, i64 b, i64 h, i64 t, i64 d, i64 xs0, i64 xs1,
                          i64 xs2, i64 xs3, i32 interleaved, i32 per_batch) {
    typedef typename Acc<T>::type C;
    const i64 half = d / 2, n = b * h * t * half;
    GRID_LOOP(i, n) {
        i64 k = i % half, ti = i / half % t, hi = i / (half * t) % h, bi = i / (half * t * h);
        i64 i1 = interleaved ? 2 * k : k, i2 = interleaved ? 2 * k + 1 : k + half;
        const T* xr = x + bi * xs0 + hi * xs1 + ti * xs2;
        i64 c = ((per_batch ? bi * t : 0) + ti) * half + k;
        C v1 = load(xr[i1 * xs3]), v2 = load(xr[i2 * xs3]), co = load(cs[c]), si = load(sn[c]);
        T* yr = out + ((bi * h + hi) * t + ti) * d;
        yr[i1] = store<T>(v1 * co - v2 * si);
        yr[i2] = store<T>(v1 * si + v2 * co);
    }
}
#define ROPE(T)                                                                                                \
    KERNEL(rope_##T, T* out, const T* x, const T* cs, const T* sn, i64 b, i64 h, i64 t, i64 d, i64 xs0, i64 xs1, \
           i64 xs2, i64 xs3, i32 interleaved, i32 per_batch) {                                                 \
        rope_impl<T>(out, x, cs, sn, b, h, t, d, xs0, xs1, xs2, xs3, interleaved, per_batch);                  \
    }
FOR_FLOATS(ROPE)
