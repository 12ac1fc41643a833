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

// ---- the tensor-core kernel (bf16, f16; E == Ev in {32, 64, 128}; contiguous last dims) --------------
// FlashAttention-2's scheme: a block of FA_WARPS warps takes FA_BM query rows (16 a warp) of one batch
// position and walks the key tiles (FA_BN keys) up to the last one it sees (causal: up to the block's
// last row). Each tile of K and V is copied to shared memory (cp.async, V's copy overlapping the
// scores); S = Q K^T and O += P V are mma.sync m16n8k16 with f32 accumulators, Q's fragments are held
// in registers throughout, the softmax is online in the base-2 domain (scale * log2 e folded into the
// scores), and O is written once. A hidden key's score is -inf (p = 0); a row whose every key is
// hidden keeps l = 0 and gives zeros; a NaN score makes its row's max NaN, hence the row NaN.
// Blocks go heaviest first (the last query tiles, under causal masking, see the most keys).
#include "mma.cuh"

#define FA_BM 64
#define FA_BN 64
#define FA_WARPS 4

#ifdef CANDLE_EMU
#define FA_UNROLL
#else
#define FA_UNROLL _Pragma("unroll")
#endif

template <typename T, int D>
__device__ void flash_impl(T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_batch, i64 L,
                           i64 S, i32 mask_kind, i32 causal, f64 scale, const AttnStrides& st,
                           const Strided<4>& batch) {
    constexpr int LD = D + 8;       // a shared row, padded 16 bytes: ldmatrix's 8 rows hit 8 distinct bank quads
    constexpr int KS = D / 16;      // k-steps of Q K^T
    constexpr int NB = FA_BN / 8;   // 8-key column blocks of S
    constexpr int OB = D / 8;       // 8-value column blocks of O
    constexpr int CH = D / 8;       // 16-byte chunks in a row
    constexpr int THREADS = FA_WARPS * 32;
    const float LOG2E = 1.4426950408889634f;
    DYNAMIC_SHARED(T, smem);
    T* ksm = smem;              // K tile (Q's before the loop)
    T* vsm = smem + FA_BN * LD;  // V tile
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3, quad = lane >> 3;
    const i64 nqt = (L + FA_BM - 1) / FA_BM;
    const i64 bi = (i64)blockIdx.x % n_batch, qt = nqt - 1 - (i64)blockIdx.x / n_batch;
    i64 off[4];
    offsets(batch, bi, off);
    const T* qb = q + off[0];
    const T* kb = k + off[1];
    const T* vb = v + off[2];
    const i64 q0 = qt * FA_BM;

    // Q's tile through shared memory into A fragments (16 rows x D a warp)
    for (int c = tid; c < FA_BM * CH; c += THREADS) {
        const int r = c / CH, col = c % CH * 8;
        const bool ok = q0 + r < L;
        cp_async_16(ksm + r * LD + col, ok ? qb + (q0 + r) * st.ql + col : qb, ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    u32 qf[KS][4];
    FA_UNROLL
    for (int kk = 0; kk < KS; ++kk)  // matrix m: rows + 8 (m & 1), columns + 8 (m >> 1)
        ldmatrix_x4<false>(qf[kk], ksm + (warp * 16 + (lane & 7) + 8 * (quad & 1)) * LD + kk * 16 + 8 * (quad >> 1));

    const i64 rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};  // this lane's rows (c[0..1], c[2..3])
    float o[OB][4];
    FA_UNROLL
    for (int b = 0; b < OB; ++b) o[b][0] = o[b][1] = o[b][2] = o[b][3] = 0.0f;
    float m_run[2] = {-infinity<float>(), -infinity<float>()}, l_run[2] = {0.0f, 0.0f};
    const float scale2 = (float)(scale * 1.4426950408889634);
    const i64 kend = causal ? mn<i64>(S, q0 + FA_BM) : S;
    const i64 nkt = (kend + FA_BN - 1) / FA_BN;

    // K(kt + 1)'s copy is issued once every warp has read K(kt), V(kt + 1)'s once every warp has read
    // V(kt): each overlaps the other half of the tile's work. One commit group per copy, empty past the
    // last tile, so that wait_group 1 always leaves exactly the newest copy in flight.
    auto copy_tile = [&](T* dst, const T* src, i64 stride, i64 c0) {
        for (int c = tid; c < FA_BN * CH; c += THREADS) {
            const int r = c / CH, col = c % CH * 8;
            const bool ok = c0 + r < S;
            cp_async_16(dst + r * LD + col, ok ? src + (c0 + r) * stride + col : src, ok);
        }
        cp_async_commit();
    };
    __syncthreads();  // every warp has its Q fragments: ksm is free
    if (nkt > 0) {
        copy_tile(ksm, kb, st.ks, 0);
        copy_tile(vsm, vb, st.vs, 0);
    }

    for (i64 kt = 0; kt < nkt; ++kt) {
        const i64 c0 = kt * FA_BN;
        cp_async_wait<1>();  // K(kt) has landed (V(kt) may still fly)
        __syncthreads();

        float s[NB][4];
        FA_UNROLL
        for (int b = 0; b < NB; ++b) s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.0f;
        FA_UNROLL
        for (int kk = 0; kk < KS; ++kk) {
            FA_UNROLL
            for (int b = 0; b < NB; b += 2) {  // matrix m: keys + 8 (m >> 1), dims + 8 (m & 1)
                u32 f[4];
                ldmatrix_x4<false>(f, ksm + (b * 8 + (lane & 7) + 8 * (quad >> 1)) * LD + kk * 16 + 8 * (quad & 1));
                const u32 b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
                mma_16816<T>(s[b], qf[kk], b0);
                mma_16816<T>(s[b + 1], qf[kk], b1);
            }
        }

        __syncthreads();  // every warp has read K(kt)
        if (kt + 1 < nkt) copy_tile(ksm, kb, st.ks, c0 + FA_BN);
        else cp_async_commit();

        // scale, mask, the tile's row max (base-2 scores)
        // (only a tile with a mask, keys past S or keys past a row's own index tests each score; rows past
        // L are zeros of Q, never written)
        float mt[2] = {-infinity<float>(), -infinity<float>()};
        const bool masked = mask_kind || c0 + FA_BN > S || (causal && c0 + FA_BN - 1 > q0);
        FA_UNROLL
        for (int b = 0; b < NB; ++b) {
            FA_UNROLL
            for (int e = 0; e < 4; ++e) {
                float x = s[b][e] * scale2;
                if (!masked) {
                    s[b][e] = x;
                    mt[e >> 1] = max_nan(mt[e >> 1], x);
                    continue;
                }
                const i64 i = rows[e >> 1], j = c0 + b * 8 + 2 * t + (e & 1);
                bool hidden = j >= S || i >= L || (causal && j > i);
                if (!hidden && mask_kind) {
                    const i64 mo = off[3] + i * st.ml + j * st.ms;
                    if (mask_kind == 1) hidden = !((const u8*)mask)[mo];
                    else x += load(((const T*)mask)[mo]) * LOG2E;
                }
                if (hidden) x = -infinity<float>();
                s[b][e] = x;
                mt[e >> 1] = max_nan(mt[e >> 1], x);
            }
        }
        float base[2];
        FA_UNROLL
        for (int r = 0; r < 2; ++r) {
            mt[r] = max_nan(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 1));
            mt[r] = max_nan(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 2));
            const float m_new = max_nan(m_run[r], mt[r]);
            base[r] = m_new == -infinity<float>() ? 0.0f : m_new;  // nothing seen yet: p = 0, not NaN
            const float corr = exp2f(m_run[r] - base[r]);
            m_run[r] = m_new;
            l_run[r] *= corr;
            FA_UNROLL
            for (int b = 0; b < OB; ++b) {
                o[b][2 * r] *= corr;
                o[b][2 * r + 1] *= corr;
            }
        }
        FA_UNROLL
        for (int b = 0; b < NB; ++b) {
            FA_UNROLL
            for (int e = 0; e < 4; ++e) {
                const float p = exp2f(s[b][e] - base[e >> 1]);
                s[b][e] = p;
                l_run[e >> 1] += p;  // this lane's part of the row sum: the 4 lanes of a row add up at the end
            }
        }

        cp_async_wait<1>();  // V(kt) has landed (K(kt + 1) may still fly)
        __syncthreads();
        FA_UNROLL
        for (int kk = 0; kk < FA_BN / 16; ++kk) {
            const u32 a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            FA_UNROLL
            for (int b = 0; b < OB; b += 2) {  // .trans, matrix m: keys + 8 (m & 1), values + 8 (m >> 1)
                u32 f[4];
                ldmatrix_x4<true>(f, vsm + (kk * 16 + (lane & 7) + 8 * (quad & 1)) * LD + b * 8 + 8 * (quad >> 1));
                const u32 b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
                mma_16816<T>(o[b], a, b0);
                mma_16816<T>(o[b + 1], a, b1);
            }
        }
        __syncthreads();  // every warp has read V(kt)
        if (kt + 1 < nkt) copy_tile(vsm, vb, st.vs, c0 + FA_BN);
        else cp_async_commit();
    }
    cp_async_wait<0>();  // nothing in flight at exit

    FA_UNROLL
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const i64 i = rows[r];
        if (i >= L) continue;
        T* y = out + (bi * L + i) * D + 2 * t;
        FA_UNROLL
        for (int b = 0; b < OB; ++b) {  // l == 0: every key hidden, zeros (a NaN l stays NaN)
            y[b * 8] = store<T>(l == 0.0f ? 0.0f : o[b][2 * r] / l);
            y[b * 8 + 1] = store<T>(l == 0.0f ? 0.0f : o[b][2 * r + 1] / l);
        }
    }
}

#define FLASH(T, D)                                                                                          \
    KERNEL(flash_attention_e##D##_##T, T* out, const T* q, const T* k, const T* v, const void* mask,        \
           i64 n_batch, i64 L, i64 S, i32 mask_kind, i32 causal, f64 scale, AttnStrides st, Strided<4> batch) { \
        flash_impl<T, D>(out, q, k, v, mask, n_batch, L, S, mask_kind, causal, scale, st, batch);           \
    }
FLASH(bf16, 32) FLASH(bf16, 64) FLASH(bf16, 128)
FLASH(f16, 32) FLASH(f16, 64) FLASH(f16, 128)

// ---- heads of up to 64 dims (E, Ev <= D, 32 or 64), any float dtype and strides: a thread per row -----
// A block takes TILE_ROWS query rows of one batch entry and walks the keys 1024 / D at a time, staged
// in shared memory in the compute type, which every thread reads at the same address (a broadcast).
// Each thread holds its query row, its output row and a tile's scores in registers and rescales its
// online softmax once per tile. The warp-per-row kernel spends a warp reduction on every key: on
// MiniLM's heads (E 32, 128 keys, f32) that was three quarters of the model's GPU time on an H200.
// Hidden keys are skipped as in the warp-per-row kernel.
#define TILE_ROWS 64

template <typename T, int D>
__device__ void attention_tiled_impl(T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_batch,
                                     i64 L, i64 S, i64 E, i64 Ev, i32 mask_kind, i32 causal, f64 scale,
                                     const AttnStrides& st, const Strided<4>& batch) {
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
                top = max_nan(top, s[jj]);  // a NaN score turns its row NaN
            }
            const C mnew = max_nan(m, top);
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
                if (e < Ev) yr[e] = store<T>(l != C(0) ? acc[e] / l : C(0));  // l 0: no key seen; NaN: NaN
        }
    }
}
#define ATTENTION_TILED(T, D)                                                                                   \
    KERNEL(attention_tiled##D##_##T, T* out, const T* q, const T* k, const T* v, const void* mask, i64 n_batch,  \
           i64 L, i64 S, i64 E, i64 Ev, i32 mask_kind, i32 causal, f64 scale, AttnStrides st, Strided<4> batch) { \
        attention_tiled_impl<T, D>(out, q, k, v, mask, n_batch, L, S, E, Ev, mask_kind, causal, scale, st, batch); \
    }
#define ATTENTION_TILED_32_64(T) ATTENTION_TILED(T, 32) ATTENTION_TILED(T, 64)
ATTENTION_TILED_32_64(bf16) ATTENTION_TILED_32_64(f16) ATTENTION_TILED_32_64(f32)
