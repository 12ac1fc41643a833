// Fused kernels over the last dim: softmax, log_softmax, layer_norm,
// rms_norm; and rotary embeddings. Rows are the leading dims of x, walked by
// the Strided<1> `rows` (x's strides), and the last dim steps `step`.
// Outputs are contiguous. f16 and bf16 compute in f32; the statistics are
// reductions in a fixed order.
//
// Three variants of softmax and norm, the host choosing (kernels/fused.py):
// for contiguous, 16-byte aligned rows, a warp per row (d <= 32 * ROW_CACHE,
// several rows a block) or a block per row (d <= ROW_BLOCK * ROW_CACHE) read
// the row once into registers, reduce, and write it once; other rows take a
// block per row that reads the row from memory on each pass.
#include "scalar.cuh"

// ---- rows cached in registers ------------------------------------------------------------------
// A group of G threads (a warp, or the block) holds a row of up to G * ROW_CACHE elements, a thread's
// share as NP packs of P = 16 / sizeof(T): its pack k is the row's pack lane + k * G, one 16-byte
// access, so that a warp's accesses are contiguous. The host launches these only when every row,
// the output's and w's and b's are 16-byte aligned and the rows contiguous with d a multiple of P.
#define ROW_CACHE 16

template <typename T, bool WARP>
struct Row {
    typedef typename Acc<T>::type C;
    static const int P = 16 / sizeof(T), NP = ROW_CACHE / P;
    i64 d, first, stride;
    int G, lane;
    __device__ Row(i64 d_) : d(d_) {
        const int per_block = WARP ? blockDim.x / 32 : 1;
        first = (i64)blockIdx.x * per_block + (WARP ? threadIdx.x / 32 : 0);
        stride = (i64)gridDim.x * per_block;
        G = WARP ? 32 : blockDim.x;
        lane = WARP ? threadIdx.x & 31 : threadIdx.x;
    }
    __device__ bool has(int k) const { return (lane + (i64)k * G) * P < d; }
    // f(x's row, out's row, the row's cache) for each row the group takes
    template <typename F>
    __device__ void each_row(T* out, const T* x, i64 n_rows, const Strided<1>& rows, C pad, F f) const {
        for (i64 r = first; r < n_rows; r += stride) {
            i64 o[1];
            offsets(rows, r, o);
            C v[NP][P];
            for (int k = 0; k < NP; ++k) load_pack(v[k], x + o[0], k, pad);
            f(out + r * d, v);
        }
    }
    // dst = pack k of the row at p, pad past the row's end
    __device__ void load_pack(C (&dst)[P], const T* p, int k, C pad) const {
        if (has(k)) {
            Vec<T, P> q = reinterpret_cast<const Vec<T, P>*>(p)[lane + (i64)k * G];
            for (int e = 0; e < P; ++e) dst[e] = load(q.v[e]);
        } else {
            for (int e = 0; e < P; ++e) dst[e] = pad;
        }
    }
    __device__ void store_pack(T* p, int k, const C (&src)[P]) const {
        if (!has(k)) return;
        Vec<T, P> q;
        for (int e = 0; e < P; ++e) q.v[e] = store<T>(src[e]);
        reinterpret_cast<Vec<T, P>*>(p)[lane + (i64)k * G] = q;
    }
    __device__ C sum(C v) const {
        if constexpr (WARP) return warp_sum(v);
        else return block_sum(v);
    }
    __device__ C max(C v) const {
        if constexpr (WARP) return warp_max(v);
        else return block_max(v);
    }
};

template <typename T, bool WARP>
__device__ void softmax_cached(T* out, const T* x, i64 n_rows, i64 d, int mode, const Strided<1>& rows) {
    typedef Row<T, WARP> R;
    typedef typename R::C C;
    const int P = R::P, NP = R::NP;
    const R g(d);
    g.each_row(out, x, n_rows, rows, -infinity<C>(), [&](T* yr, C (&v)[NP][P]) {
        C m = -infinity<C>();
        for (int k = 0; k < NP; ++k)
            for (int e = 0; e < P; ++e) m = max_nan(m, v[k][e]);
        m = g.max(m);
        // v becomes x - m, then (softmax) its exp: one cached value an element
        C s = C(0);
        for (int k = 0; k < NP; ++k) {
            if (!g.has(k)) continue;
            for (int e = 0; e < P; ++e) {
                v[k][e] -= m;
                C ex = m_exp(v[k][e]);
                s += ex;
                if (mode == 0) v[k][e] = ex;
            }
        }
        s = g.sum(s);
        const C ls = m_log(s);
        for (int k = 0; k < NP; ++k) {
            for (int e = 0; e < P; ++e) v[k][e] = mode == 0 ? v[k][e] / s : v[k][e] - ls;
            g.store_pack(yr, k, v[k]);
        }
    });
}

template <typename T, bool WARP>
__device__ void norm_cached(T* out, const T* x, const T* w, const T* b, i64 n_rows, i64 d, f64 eps, int rms,
                            const Strided<1>& rows) {
    typedef Row<T, WARP> R;
    typedef typename R::C C;
    const int P = R::P, NP = R::NP;
    const R g(d);
    g.each_row(out, x, n_rows, rows, C(0), [&](T* yr, C (&v)[NP][P]) {
        C mean = C(0), s = C(0);
        for (int k = 0; k < NP; ++k)
            for (int e = 0; e < P; ++e) s += v[k][e];
        if (!rms) mean = g.sum(s) / (C)d;
        C q = C(0);
        for (int k = 0; k < NP; ++k) {
            if (!g.has(k)) continue;
            for (int e = 0; e < P; ++e) {
                v[k][e] -= mean;
                q += v[k][e] * v[k][e];
            }
        }
        const C inv = C(1) / m_sqrt(g.sum(q) / (C)d + (C)eps);
        for (int k = 0; k < NP; ++k) {
            C wk[P], bk[P];
            g.load_pack(wk, w, k, C(0));
            if (b) g.load_pack(bk, b, k, C(0));
            for (int e = 0; e < P; ++e) {
                v[k][e] = v[k][e] * inv * wk[e];
                if (b) v[k][e] += bk[e];
            }
            g.store_pack(yr, k, v[k]);
        }
    });
}

// The cached kernels take the fallback's parameters (step is 1); the block variants run at most
// ROW_BLOCK threads, which bounds their registers to a block's share.
#define ROW_BLOCK 512
#define CACHED(T)                                                                                                  \
    KERNEL(softmax_warp_##T, T* out, const T* x, i64 n_rows, i64 d, i64, i32 mode, Strided<1> rows) {              \
        softmax_cached<T, true>(out, x, n_rows, d, mode, rows);                                                    \
    }                                                                                                              \
    KERNEL_BOUNDED(ROW_BLOCK, softmax_block_##T, T* out, const T* x, i64 n_rows, i64 d, i64, i32 mode,              \
                   Strided<1> rows) {                                                                              \
        softmax_cached<T, false>(out, x, n_rows, d, mode, rows);                                                   \
    }                                                                                                              \
    KERNEL(norm_warp_##T, T* out, const T* x, const T* w, const T* b, i64 n_rows, i64 d, i64, f64 eps, i32 rms,     \
           Strided<1> rows) {                                                                                      \
        norm_cached<T, true>(out, x, w, b, n_rows, d, eps, rms, rows);                                             \
    }                                                                                                              \
    KERNEL_BOUNDED(ROW_BLOCK, norm_block_##T, T* out, const T* x, const T* w, const T* b, i64 n_rows, i64 d, i64,   \
                   f64 eps, i32 rms, Strided<1> rows) {                                                            \
        norm_cached<T, false>(out, x, w, b, n_rows, d, eps, rms, rows);                                            \
    }
FOR_FLOATS(CACHED)

// ---- the fallback (long, strided or unaligned rows): a block per row, each pass reading the row ----
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
            m = max_nan(m, v);
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
