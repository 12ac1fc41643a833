// Scaled-dot-product attention, out = softmax(q @ k^T * scale + mask) @ v,
// with an online softmax (a running max and sum per query row; the partial
// output rescaled when the max grows): no score matrix exists in memory.
//
// A warp per query row: the lanes split the head dims of each q . k dot
// product (then a warp sum) and the value dims of the output, which they
// keep in registers, VCHUNK at a time (a wider Ev walks the keys again per
// chunk). Keys hidden by the mask (u8 0) or by causality (j > i) are
// skipped; an additive mask is added to the scores; a row whose every key
// is hidden gives zeros. Batch dims broadcast through the Strided<4>
// `batch` (operands q, k, v, mask); `st` holds the row and column strides
// (q: L, E; k: S, E; v: S, Ev; mask: L, S).
#include "scalar.cuh"

#define VCHUNK 8  // output values per lane per pass: 256 per warp

struct AttnStrides {
    i64 ql, qe, ks, ke, vs, ve, ml, ms;
};

// mask_kind 0: none, 1: u8 (0 hides), 2: added (the query dtype)
template <typename T>
__device__ void attention_impl(T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_rows, i64 L,
                               i64 S, i64 E, i64 Ev, i32 mask_kind, i32 causal, f64 scale, const AttnStrides& st,
                               const Strided<4>& batch) {
    typedef typename Acc<T>::type C;
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (i64 row = (i64)blockIdx.x * warps + (threadIdx.x >> 5); row < n_rows; row += (i64)gridDim.x * warps) {
        const i64 bi = row / L, i = row % L;
        i64 off[4];
        offsets(batch, bi, off);
        const T* qr = q + off[0] + i * st.ql;
        const T* kb = k + off[1];
        const T* vb = v + off[2];
        const i64 moff = off[3] + i * st.ml;
        T* yr = out + row * Ev;
        for (i64 v0 = 0; v0 < Ev; v0 += 32 * VCHUNK) {
            C acc[VCHUNK];
            for (int c = 0; c < VCHUNK; ++c) acc[c] = C(0);
            C m = -infinity<C>(), l = C(0);
            const i64 last = causal ? mn<i64>(S - 1, i) : S - 1;
            for (i64 j = 0; j <= last; ++j) {
                C bias = C(0);
                if (mask_kind == 1 && !((const u8*)mask)[moff + j * st.ms]) continue;
                if (mask_kind == 2) bias = load(((const T*)mask)[moff + j * st.ms]);
                C dot = C(0);
                for (i64 e = lane; e < E; e += 32) dot += load(qr[e * st.qe]) * load(kb[j * st.ks + e * st.ke]);
                C s = warp_sum(dot) * (C)scale + bias;
                if (s == -infinity<C>()) continue;  // a key masked out by -inf (NaN propagates)
                C mnew = s > m ? s : m;
                C corr = m_exp(m - mnew), p = m_exp(s - mnew);
                l = l * corr + p;
                for (int c = 0; c < VCHUNK; ++c) {
                    i64 e = v0 + lane + 32 * c;
                    C val = e < Ev ? load(vb[j * st.vs + e * st.ve]) : C(0);
                    acc[c] = acc[c] * corr + p * val;
                }
                m = mnew;
            }
            for (int c = 0; c < VCHUNK; ++c) {
                i64 e = v0 + lane + 32 * c;
                if (e < Ev) yr[e] = store<T>(l > C(0) ? acc[c] / l : C(0));
            }
        }
    }
}
#define ATTENTION(T)                                                                                            \
    KERNEL(attention_##T, T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_rows, i64 L, i64 S, \
           i64 E, i64 Ev, i32 mask_kind, i32 causal, f64 scale, AttnStrides st, Strided<4> batch) {              \
        attention_impl<T>(out, q, k, v, mask, n_rows, L, S, E, Ev, mask_kind, causal, scale, st, batch);        \
    }
FOR_FLOATS(ATTENTION)
