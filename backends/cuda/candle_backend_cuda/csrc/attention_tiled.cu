// Scaled-dot-product attention for short heads (E and Ev at most D, 32 or
// 64: BERT-sized models), a thread per query row. A block takes TILE_ROWS
// query rows of one batch entry and walks the keys 1024 / D at a time,
// staged in shared memory in the compute type, which every thread reads at
// the same address (a broadcast). Each thread holds its query row, its
// output row and a tile's scores in registers and rescales its online
// softmax once per tile. The warp-per-row kernel (attention.cu) spends a
// warp reduction on every key: on MiniLM's heads (E 32, 128 keys) that was
// three quarters of the model's GPU time.
//
// Semantics as attention.cu: keys hidden by a u8 mask (0), by causality
// (j > i) or by a score of -inf are skipped, an additive mask is added to
// the scores, a row whose every key is hidden gives zeros, NaN propagates.
#include "scalar.cuh"

#define TILE_ROWS 64

struct TiledStrides {
    i64 ql, qe, ks, ke, vs, ve, ml, ms;
};

template <typename T, int D>
__device__ void attention_tiled_impl(T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_batch,
                                     i64 L, i64 S, i64 E, i64 Ev, i32 mask_kind, i32 causal, f64 scale,
                                     const TiledStrides& st, const Strided<4>& batch) {
    typedef typename Acc<T>::type C;
    constexpr int TILE_KEYS = 1024 / D;  // a tile's scores in registers: 32 keys at D 32, 16 at D 64
    __shared__ __align__(16) C ks[TILE_KEYS][D];
    __shared__ __align__(16) C vs[TILE_KEYS][D];
    const int t = threadIdx.x;
    const C sc = (C)scale, ninf = -infinity<C>();
    const i64 tiles = (L + TILE_ROWS - 1) / TILE_ROWS;
    for (i64 tile = blockIdx.x; tile < n_batch * tiles; tile += gridDim.x) {
        const i64 bi = tile / tiles, i0 = tile % tiles * TILE_ROWS, i = i0 + t;
        const bool live = i < L;
        i64 off[4];
        offsets(batch, bi, off);
        const T* kb = k + off[1];
        const T* vb = v + off[2];
        const i64 moff = off[3] + i * st.ml;
        C qr[D], acc[D];
        for (int e = 0; e < D; ++e) {
            qr[e] = live && e < E ? load(q[off[0] + i * st.ql + e * st.qe]) : C(0);
            acc[e] = C(0);
        }
        C m = ninf, l = C(0);
        const i64 keys = causal ? mn<i64>(S, mn<i64>(L, i0 + TILE_ROWS)) : S;  // past the block's last row
        for (i64 j0 = 0; j0 < keys; j0 += TILE_KEYS) {
            __syncthreads();  // the last tile's readers are done with it
            for (int x = t; x < TILE_KEYS * D; x += blockDim.x) {
                const int jj = x / D, e = x % D;
                const i64 j = j0 + jj;
                ks[jj][e] = j < S && e < E ? load(kb[j * st.ks + e * st.ke]) : C(0);
                vs[jj][e] = j < S && e < Ev ? load(vb[j * st.vs + e * st.ve]) : C(0);
            }
            __syncthreads();
            if (!live) continue;
            C s[TILE_KEYS], top = ninf;
#pragma unroll
            for (int jj = 0; jj < TILE_KEYS; ++jj) {
                const i64 j = j0 + jj;
                C d4[4] = {C(0), C(0), C(0), C(0)};  // four partial sums: four chains of FMAs, not one
                for (int e = 0; e < D; ++e) d4[e & 3] += qr[e] * ks[jj][e];
                C x = ((d4[0] + d4[1]) + (d4[2] + d4[3])) * sc;
                bool hidden = j >= S || (causal && j > i);
                if (!hidden && mask_kind == 1) hidden = !((const u8*)mask)[moff + j * st.ms];
                if (!hidden && mask_kind == 2) x += load(((const T*)mask)[moff + j * st.ms]);
                s[jj] = hidden ? ninf : x;
                top = s[jj] > top ? s[jj] : top;
            }
            const C mnew = top > m ? top : m;
            if (mnew == ninf) continue;  // every key so far hidden
            const C corr = m_exp(m - mnew);
            l *= corr;
            for (int e = 0; e < D; ++e) acc[e] *= corr;
#pragma unroll
            for (int jj = 0; jj < TILE_KEYS; ++jj) {
                if (s[jj] == ninf) continue;  // hidden: skipped, as a value there may be inf or NaN
                const C p = m_exp(s[jj] - mnew);
                l += p;
                for (int e = 0; e < D; ++e) acc[e] += p * vs[jj][e];
            }
            m = mnew;
        }
        if (live) {
            T* yr = out + (bi * L + i) * Ev;
            for (int e = 0; e < D; ++e)
                if (e < Ev) yr[e] = store<T>(l > C(0) ? acc[e] / l : C(0));
        }
    }
}
#define ATTENTION_TILED(T, D)                                                                                   \
    KERNEL(attention_tiled##D##_##T, T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_batch,  \
           i64 L, i64 S, i64 E, i64 Ev, i32 mask_kind, i32 causal, f64 scale, TiledStrides st, Strided<4> batch) { \
        attention_tiled_impl<T, D>(out, q, k, v, mask, n_batch, L, S, E, Ev, mask_kind, causal, scale, st, batch); \
    }
#define ATTENTION_TILED_32_64(T) ATTENTION_TILED(T, 32) ATTENTION_TILED(T, 64)
ATTENTION_TILED_32_64(bf16) ATTENTION_TILED_32_64(f16) ATTENTION_TILED_32_64(f32)
